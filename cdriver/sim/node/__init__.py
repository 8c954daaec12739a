"""Nodes of the local cluster.

`registration` makes schedulable Node objects without a kubelet; `simulated/` is the kubelet
and container-runtime stand-in; `real/` runs a real kubelet, containerd and runc per node in
namespaces of its own; `addresses` hands out their loopback addresses; `cli.py` is
`cdriver sim node`.
"""
