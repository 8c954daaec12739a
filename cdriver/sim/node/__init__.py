"""Nodes of the local cluster.

`registration` makes schedulable Node objects without a kubelet; `simulated/` is the kubelet
and container-runtime stand-in; `cli.py` is `cdriver sim node`. Another kind of node (a real
kubelet and container runtime) belongs beside `simulated/`.
"""
