"""Simulated nodes: a kubelet and container-runtime stand-in (see agent.py)."""
