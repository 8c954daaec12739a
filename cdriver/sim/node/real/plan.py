"""What a real node is made of, as plain data: addresses, paths and configuration files.

Addresses (all inside network namespaces the harness creates; the machine's own namespace
keeps only loopback):

    hub namespace   one bridge joining every node's eth0 (no address)
    node i          eth0 10.201.0.i/24 (the node IP), pods 10.202.i.0/24 on bridge cni0,
                    a route to every other node's pod range via that node's IP, and the
                    `kubernetes` Service address 10.0.0.1 on its loopback (a forwarder there
                    relays to the API server on the machine's 127.0.0.1)

Inside the node's own mount namespace, kubelet and containerd see a host of their own:
/run is a fresh tmpfs, and /var/lib, /var/log, /run/containerd, /run/cdi and the NVIDIA
driver root are bound from the node's root directory, so the chart's hostPaths work unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

NODE_SUBNET = "10.201.0"
POD_SUBNET_PREFIX = "10.202"
API_SERVICE_IP = "10.0.0.1"  # first address of the cluster's service range
API_SERVICE_PORT = 443
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
#: containerd's snapshotter: image layers shared by overlay mounts; the native one (a full copy
#: of the image per container, the whole driver image each time) where overlay does not work
SNAPSHOTTER = "overlayfs"
FALLBACK_SNAPSHOTTER = "native"
KUBELET_ROOT = "/var/lib/kubelet"
CDI_DIR = "/var/run/cdi"
DRIVER_ROOT = "/run/nvidia/driver"
KUBELET_PORT = 10250
MAX_NODES = 250


def world_tag(base_dir: Path) -> str:
    """Short tag that keeps two worlds' namespaces and cgroups apart (from the base directory)."""
    return hashlib.sha256(str(base_dir.resolve()).encode()).hexdigest()[:6]


@dataclass(frozen=True)
class NodePlan:
    """One real node: its name, index, root directory and network identity."""

    name: str
    index: int  # 1-based; sets the addresses
    root: Path
    tag: str

    def __post_init__(self) -> None:
        if not 1 <= self.index <= MAX_NODES:
            raise ValueError(f"real node index {self.index} out of range 1..{MAX_NODES}")

    @property
    def netns(self) -> str:
        return f"cdr{self.tag}-n{self.index}"

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns

    @property
    def hub_veth(self) -> str:
        return f"cdr{self.tag}n{self.index}"

    @property
    def ip(self) -> str:
        return f"{NODE_SUBNET}.{self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"{POD_SUBNET_PREFIX}.{self.index}.0/24"

    @property
    def cgroup(self) -> str:
        """The node's cgroup (every v1 hierarchy): kubelet's cgroupRoot holds pods, system/ the daemons."""
        return f"/cdriver-{self.tag}-{self.name}"

    def path(self, rel: str) -> Path:
        return self.root / rel


def hub_netns(tag: str) -> str:
    return f"cdr{tag}-hub"


def network_commands(node: NodePlan, peers: list[NodePlan]) -> list[list[str]]:
    """`ip` commands that give `node` its namespace, address, routes and API address (the
    hub namespace and its bridge exist already)."""
    ns, hub = node.netns, hub_netns(node.tag)
    cmds = [
        ["ip", "netns", "add", ns],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        ["ip", "-n", ns, "addr", "add", f"{API_SERVICE_IP}/32", "dev", "lo"],
        ["ip", "-n", hub, "link", "add", node.hub_veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
        ["ip", "-n", hub, "link", "set", node.hub_veth, "master", "br0", "up"],
        ["ip", "-n", ns, "addr", "add", f"{node.ip}/24", "dev", "eth0"],
        ["ip", "-n", ns, "link", "set", "eth0", "up"],
        ["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
    ]
    for peer in peers:
        if peer.index != node.index:
            cmds.append(["ip", "-n", ns, "route", "add", peer.pod_cidr, "via", peer.ip])
    return cmds


def hub_commands(tag: str) -> list[list[str]]:
    hub = hub_netns(tag)
    return [["ip", "netns", "add", hub],
            ["ip", "-n", hub, "link", "add", "br0", "type", "bridge"],
            ["ip", "-n", hub, "link", "set", "br0", "up"]]


def cni_config(node: NodePlan) -> dict:
    """The pod network: a bridge with host-local addresses from the node's pod range."""
    return {
        "cniVersion": "1.0.0",
        "name": "cdriver-pods",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
        ],
    }


def containerd_config(node: NodePlan, runc: Path, cni_bin: Path, sandbox_image: str,
                      snapshotter: str = SNAPSHOTTER) -> str:
    """containerd 2.x (config version 3): CRI with the given snapshotter, runc, CNI and CDI."""
    conf_dir = node.path("etc/cni/net.d")
    return f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[ttrpc]
  address = "{CONTAINERD_SOCKET}.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = {json.dumps(snapshotter)}
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {json.dumps(sandbox_image)}

[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = ["{CDI_DIR}"]
  # this machine refuses a lower oom_score_adj (no CAP_SYS_RESOURCE): keep kubelet's -998 at ours
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = {json.dumps(str(runc))}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{json.dumps(str(cni_bin))}]
    conf_dir = {json.dumps(str(conf_dir))}
"""


def kubelet_config(node: NodePlan, ca_file: Path, cert: Path, key: Path) -> dict:
    """KubeletConfiguration: cgroup v1 with cgroupfs under the node's own cgroup, webhook authn/authz,
    serving certificate from the cluster CA, no iptables (the machine has none to spare)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup,
        "address": node.ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "resolvConf": str(node.path("etc/resolv.conf")),
        "clusterDomain": "cluster.local",
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                         "imagefs.available": "1%"},
        "podLogsDir": str(node.path("var/log/pods")),
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "serializeImagePulls": False,
        "maxPods": 50,
    }


def kubeconfig(node: NodePlan, ca_file: Path, cert: Path, key: Path) -> dict:
    """kubelet's client configuration: the API server at the `kubernetes` Service address."""
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": f"https://{API_SERVICE_IP}:{API_SERVICE_PORT}",
                                                    "certificate-authority": str(ca_file)}}],
        "users": [{"name": node.name, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": node.name}}],
        "current-context": "local",
    }


def kubelet_args(kubelet: Path, node: NodePlan, labels: dict[str, str]) -> list[str]:
    args = [str(kubelet), f"--config={node.path('kubelet/config.yaml')}",
            f"--kubeconfig={node.path('kubelet/kubeconfig')}", f"--hostname-override={node.name}",
            f"--node-ip={node.ip}", f"--root-dir={KUBELET_ROOT}", f"--cert-dir={node.path('kubelet/pki')}", "-v=2"]
    if labels:
        args.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    return args


#: (directory below the node root, where the node sees it) bound inside its mount namespace
BINDS = (("var/lib", "/var/lib"), ("var/log", "/var/log"), ("run/containerd", "/run/containerd"),
         ("run/cdi", "/run/cdi"), ("run/nvidia/driver", DRIVER_ROOT))


def mount_setup_script(node: NodePlan) -> str:
    """/bin/sh run in the node's new (private) mount namespace before it holds it open:
    shared propagation inside (kubelet's Bidirectional mounts), a tmpfs /run, and the binds."""
    lines = ["set -e", "mount --make-rshared /", "mount -t tmpfs -o mode=755 tmpfs /run"]
    for rel, target in BINDS:
        lines.append(f"mkdir -p {shlex.quote(target)}")
        lines.append(f"mount --bind {shlex.quote(str(node.path(rel)))} {shlex.quote(target)}")
    lines.append("echo ready")
    lines.append("exec sleep infinity")
    return "\n".join(lines)


def render_yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)
