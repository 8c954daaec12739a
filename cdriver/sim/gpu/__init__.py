"""Simulated GPU hardware: topology, GPU profiles, device nodes, driver roots and the mock NVML."""
