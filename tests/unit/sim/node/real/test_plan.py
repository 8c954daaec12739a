"""Real nodes as plain data: addresses stay inside the world's namespaces, pods of every node
are routable from every other node, and kubelet/containerd get the settings this machine needs."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest

from cdriver.sim.node.real import plan


def nodes(count: int, tag: str = "abc123") -> list[plan.NodePlan]:
    return [plan.NodePlan(f"n{i}", i, Path(f"/tmp/w/nodes/n{i}"), tag) for i in range(1, count + 1)]


def test_every_address_command_targets_a_world_namespace() -> None:
    """No link, address or route is configured in the machine's own namespace."""
    world = nodes(3)
    cmds = plan.hub_commands("abc123") + [c for n in world for c in plan.network_commands(n, world)]
    for cmd in cmds:
        if cmd[1] == "netns":
            assert cmd[3].startswith("cdrabc123-"), cmd
        else:
            assert cmd[1] == "-n" and cmd[2].startswith("cdrabc123-"), cmd


def test_each_node_routes_every_other_nodes_pods_via_that_node() -> None:
    world = nodes(3)
    routes = {tuple(c[5:8]) for c in plan.network_commands(world[1], world) if c[3:5] == ["route", "add"]}
    assert routes == {(world[0].pod_cidr, "via", world[0].ip), (world[2].pod_cidr, "via", world[2].ip)}


def test_node_and_pod_ranges_are_disjoint_and_unique() -> None:
    world = nodes(4)
    pod_nets = [ipaddress.ip_network(n.pod_cidr) for n in world]
    node_net = ipaddress.ip_network(f"{plan.NODE_SUBNET}.0/24")
    assert len({n.ip for n in world}) == 4
    assert all(ipaddress.ip_address(n.ip) in node_net for n in world)
    assert not any(a.overlaps(b) for i, a in enumerate(pod_nets) for b in pod_nets[i + 1:])
    assert not any(p.overlaps(node_net) for p in pod_nets)


def test_node_index_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        plan.NodePlan("n0", 0, Path("/tmp/x"), "t")


def test_world_tag_separates_base_directories() -> None:
    assert plan.world_tag(Path("/tmp/a")) != plan.world_tag(Path("/tmp/b"))
    assert plan.world_tag(Path("/tmp/a")) == plan.world_tag(Path("/tmp/a/"))


def test_containerd_config_uses_overlayfs_snapshotter_cdi_dir_and_sandbox_image() -> None:
    node = nodes(1)[0]
    conf = tomllib.loads(plan.containerd_config(node, Path("/usr/sbin/runc"), Path("/cni/bin"), "pause:local"))
    images = conf["plugins"]["io.containerd.cri.v1.images"]
    runtime = conf["plugins"]["io.containerd.cri.v1.runtime"]
    assert images["snapshotter"] == "overlayfs"
    fallback = tomllib.loads(plan.containerd_config(node, Path("/usr/sbin/runc"), Path("/cni/bin"), "pause:local",
                                                    plan.FALLBACK_SNAPSHOTTER))
    assert fallback["plugins"]["io.containerd.cri.v1.images"]["snapshotter"] == "native"
    assert images["pinned_images"]["sandbox"] == "pause:local"
    assert runtime["cdi_spec_dirs"] == [plan.CDI_DIR]
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/usr/sbin/runc"
    assert runtime["cni"]["conf_dir"] == str(node.root / "etc/cni/net.d")


def test_kubelet_config_for_cgroup_v1_webhook_auth_and_serving_cert() -> None:
    node = nodes(2)[1]
    conf = plan.kubelet_config(node, Path("/pki/ca.crt"), Path("/k/kubelet.crt"), Path("/k/kubelet.key"))
    assert conf["failCgroupV1"] is False and conf["cgroupDriver"] == "cgroupfs"
    assert conf["cgroupRoot"] == node.cgroup
    assert conf["authentication"]["webhook"]["enabled"] is True
    assert conf["authentication"]["anonymous"]["enabled"] is False
    assert conf["authorization"]["mode"] == "Webhook"
    assert conf["address"] == node.ip and conf["tlsCertFile"] == "/k/kubelet.crt"
    kubeconfig = plan.kubeconfig(node, Path("/pki/ca.crt"), Path("/c.crt"), Path("/c.key"))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{plan.API_SERVICE_IP}:443"


def test_cni_config_hands_out_the_node_pod_range() -> None:
    node = nodes(3)[2]
    bridge = plan.cni_config(node)["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.202.3.0/24"}]]


def test_mount_setup_binds_node_directories_over_the_host_paths() -> None:
    node = nodes(1)[0]
    script = plan.mount_setup_script(node)
    assert script.index("--make-rshared /") < script.index("tmpfs /run") < script.index("mount --bind")
    assert f"mount --bind {node.root}/run/nvidia/driver {plan.DRIVER_ROOT}" in script
    assert f"mount --bind {node.root}/var/lib /var/lib" in script
    assert script.rstrip().endswith("exec sleep infinity")
