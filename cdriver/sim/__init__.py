"""Simulation kit: one sub-package per trade, each with its `cli.py` (mounted by `cli.py`).

`controlplane` (the real local control plane), `gpu` (simulated GPU hardware and driver
roots), `node` (Node registration and the simulated kubelet), `imex` (IMEX stand-ins and the
host-managed service), `world` (the whole cluster, scenarios, the demo). Layers, checked by
`make lint`: world above node and imex, above gpu and controlplane.
"""
