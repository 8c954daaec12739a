"""NVIDIA driver discovery on a node: NVML (through pynvml) and procfs, below a driver root."""
