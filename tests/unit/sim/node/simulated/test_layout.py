"""A simulated node's directory layout and node-path mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.sim.node.simulated.layout import LayoutError, NodeLayout, normalize_node_path


def test_kubelet_and_cdi_dirs_live_below_the_root(tmp_path: Path) -> None:
    lay = NodeLayout.at(tmp_path / "n1").ensure()
    assert lay.plugins_dir == lay.root / "var/lib/kubelet/plugins" and lay.plugins_dir.is_dir()
    assert lay.registry_dir == lay.root / "var/lib/kubelet/plugins_registry" and lay.registry_dir.is_dir()
    assert lay.cdi_dirs == [lay.root / "etc/cdi", lay.root / "var/run/cdi"]
    assert lay.driver_root == lay.root / "run/nvidia/driver"
    assert lay.container_log("ns", "pod", "uid", "main", 2) == lay.root / "logs/ns_pod_uid/main/2.log"


@pytest.mark.parametrize(("path", "normal"), [("/", "/"), ("/a//b/./c", "/a/b/c"), ("/../../x", "/x"),
                                              ("/a/b/..", "/a")])
def test_node_paths_are_normalized_and_never_leave_the_root(path: str, normal: str) -> None:
    assert normalize_node_path(path) == normal


def test_relative_node_paths_and_unsafe_names_are_refused(tmp_path: Path) -> None:
    lay = NodeLayout.at(tmp_path)
    with pytest.raises(LayoutError, match="absolute"):
        lay.host_path("var/lib")
    with pytest.raises(LayoutError, match="file name"):
        lay.pod_dir("../etc")


def test_resolve_external_prefers_the_node_mapping(tmp_path: Path) -> None:
    lay = NodeLayout.at(tmp_path / "n").ensure()
    inside = lay.plugins_dir / "drv" / "dra.sock"
    assert lay.resolve_external(str(inside)) == inside  # already a machine path in the root
    assert lay.resolve_external("/var/lib/kubelet/plugins") == lay.plugins_dir  # node path
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert lay.resolve_external(str(outside)) == outside  # only exists as given
    assert lay.resolve_external("/nowhere/at/all") == lay.root / "nowhere/at/all"
