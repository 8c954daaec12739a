"""The upstream driver: finding its build, the image content nodes get, its chart values."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.sim.node.simulated.images import ImageContent, find_image, image_repository
from cdriver.sim.world import upstream_driver
from cdriver.sim.world.upstream_driver import PEER_IMAGE_REPOSITORY, PeerBuild, PeerError


def _fake_build(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    for name in upstream_driver.PEER_BINARIES:
        (root / "bin" / name).write_text("#!/bin/sh\n")
        (root / "bin" / name).chmod(0o755)
    chart = root / "src" / upstream_driver.PEER_CHART_SUBDIR
    chart.mkdir(parents=True)
    (chart / "Chart.yaml").write_text("name: x\n")
    return root


@pytest.mark.parametrize(("image", "repository"), [
    ("registry.k8s.io/a/b:v25.8.0", "registry.k8s.io/a/b"),
    ("registry.k8s.io/a/b", "registry.k8s.io/a/b"),
    ("localhost:5000/a/b:v1", "localhost:5000/a/b"),
    ("localhost:5000/a/b", "localhost:5000/a/b"),
    ("r/a@sha256:0123", "r/a"),
    ("r/a:v1@sha256:0123", "r/a"),
])
def test_image_repository_drops_tag_and_digest_but_keeps_a_registry_port(image: str, repository: str) -> None:
    assert image_repository(image) == repository


def test_find_image_matches_any_tag_of_the_repository_only() -> None:
    content = ImageContent("r/driver", path=("/opt/bin",), files=(("/templates", "/src/templates"),))
    assert find_image([content], "r/driver:v1") is content
    assert find_image([content], "r/driver-other:v1") is None
    assert find_image([content], "") is None
    (mount,) = content.mounts()
    assert (mount.source, mount.target, mount.read_only) == ("/src/templates", "/templates", True)


def test_parse_peer_line_takes_the_last_absolute_directory() -> None:
    assert upstream_driver.parse_peer_line("[build-peer] cached\npeer=relative\npeer=/c/peer-1\n") == Path("/c/peer-1")
    assert upstream_driver.parse_peer_line("[build-peer] build FAILED\n") is None


def test_peer_dir_override_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream_driver.ENV_PEER_DIR, str(tmp_path / "empty"))
    with pytest.raises(PeerError, match="not a finished peer build.*compute-domain-controller.*make peer"):
        upstream_driver.peer_build(echo=False)
    monkeypatch.setenv(upstream_driver.ENV_PEER_DIR, str(_fake_build(tmp_path / "ok")))
    build = upstream_driver.peer_build(echo=False)
    assert build.chart == tmp_path / "ok" / "src" / upstream_driver.PEER_CHART_SUBDIR


def test_the_image_puts_the_binaries_on_path_and_binds_templates(tmp_path: Path) -> None:
    image = PeerBuild(_fake_build(tmp_path)).image()
    assert image.repository == PEER_IMAGE_REPOSITORY
    assert image.path == (str(tmp_path / "bin"),)
    assert dict(image.files)["/templates"] == str(tmp_path / "src" / "templates")


def test_values_select_compute_domains_only_and_point_at_the_driver_root() -> None:
    values = upstream_driver.peer_helm_values("/run/nvidia/driver", "hostManaged", {"HostManagedIMEXDaemon": True})
    settings = dict(v.split("=", 1) for v in values[1::2])
    assert settings["resources.gpus.enabled"] == "false"
    assert settings["resources.computeDomains.imex.mode"] == "hostManaged"
    assert settings["altProcDevices"] == "/run/nvidia/driver/proc/devices"
    assert settings["featureGates.HostManagedIMEXDaemon"] == "true"


def test_the_source_tarball_is_found_from_the_environment_or_missing_names_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tarball = tmp_path / "dra-driver-nvidia-gpu-0123abcd.tar.xz"
    tarball.write_bytes(b"")
    monkeypatch.delenv("CDRIVER_PEER_TARBALL", raising=False)
    monkeypatch.setenv("CDRIVER_PEERS_DIR", str(tmp_path))
    assert upstream_driver.find_source_tarball() == tarball
    monkeypatch.setenv("CDRIVER_PEERS_DIR", str(tmp_path / "elsewhere"))
    with pytest.raises(upstream_driver.PeerSourceMissing, match="CDRIVER_PEERS_DIR="):
        upstream_driver.find_source_tarball()
    monkeypatch.setenv("CDRIVER_PEER_TARBALL", str(tmp_path / "missing.tar.xz"))
    with pytest.raises(upstream_driver.PeerSourceMissing, match="is not a file"):
        upstream_driver.find_source_tarball()
