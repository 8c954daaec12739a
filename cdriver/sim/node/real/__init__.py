"""Real nodes: kubelet, containerd, runc and CNI in namespaces of their own (see fleet.py).

`plan` holds what a node is made of as plain data, `network` and `relay` its network
namespaces and bridges, `cgroups` its cgroup trees, `images` what containerd imports, `node`
one node and `fleet` the nodes of one cluster.
"""
