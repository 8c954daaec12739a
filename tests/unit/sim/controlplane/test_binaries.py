"""Locating the control-plane binaries: build output parsing, env overrides, build failures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cdriver.sim.controlplane import binaries
from cdriver.sim.controlplane.binaries import BinariesError


def _fake_bins(directory: Path, names: tuple[str, ...]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return directory


def test_parse_build_output_takes_component_lines_only() -> None:
    text = "[build] etcd: cached\netcd=/c/etcd-v3\nnoise=/x\nkube=/c/kube-v1\nkube=relative\n"
    assert binaries.parse_build_output(text) == {"etcd": Path("/c/etcd-v3"), "kube": Path("/c/kube-v1")}


def test_env_override_skips_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etcd = _fake_bins(tmp_path / "etcd", ("etcd",))
    kube = _fake_bins(tmp_path / "kube", binaries.COMPONENT_BINARIES["kube"])
    monkeypatch.setenv("CDRIVER_ETCD_BIN_DIR", str(etcd))
    monkeypatch.setenv("CDRIVER_KUBE_BIN_DIR", str(kube))
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(tmp_path / "absent.sh"))
    found = binaries.control_plane_binaries(echo=False)
    assert found.etcd == etcd / "etcd"
    assert found.kube_apiserver == kube / "kube-apiserver"
    assert found.kubectl == kube / "kubectl"


def test_prometheus_binaries_come_from_their_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prom = _fake_bins(tmp_path / "prom", ("prometheus", "promtool"))
    monkeypatch.setenv("CDRIVER_PROMETHEUS_BIN_DIR", str(prom))
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(tmp_path / "absent.sh"))
    found = binaries.prometheus_binaries(echo=False)
    assert (found.prometheus, found.promtool) == (prom / "prometheus", prom / "promtool")


def test_prometheus_binaries_are_built_by_the_build_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prom = _fake_bins(tmp_path / "prom", ("prometheus", "promtool"))
    script = tmp_path / "build.sh"
    script.write_text(f"[ \"$1\" = prometheus ] || exit 9\necho building >&2\necho prometheus={prom}\n")
    monkeypatch.delenv("CDRIVER_PROMETHEUS_BIN_DIR", raising=False)
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(script))
    assert binaries.prometheus_binaries(echo=False).promtool == prom / "promtool"


def test_env_override_missing_binary_names_variable_and_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = _fake_bins(tmp_path / "kube", ("kube-apiserver",))
    monkeypatch.setenv("CDRIVER_KUBE_BIN_DIR", str(kube))
    with pytest.raises(BinariesError) as err:
        binaries.component_dirs(("kube",), echo=False)
    msg = str(err.value)
    assert "CDRIVER_KUBE_BIN_DIR" in msg and "kube-scheduler" in msg and str(kube) in msg


def test_missing_build_script_says_how_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDRIVER_ETCD_BIN_DIR", raising=False)
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(tmp_path / "absent.sh"))
    with pytest.raises(BinariesError, match="CDRIVER_ETCD_BIN_DIR"):
        binaries.component_dirs(("etcd",), echo=False)


def test_failed_build_reports_exit_code_and_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "build.sh"
    script.write_text("echo compiling $1 >&2\necho 'go: module lookup disabled' >&2\nexit 7\n")
    monkeypatch.delenv("CDRIVER_ETCD_BIN_DIR", raising=False)
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(script))
    with pytest.raises(BinariesError) as err:
        binaries.component_dirs(("etcd",), echo=False)
    msg = str(err.value)
    assert "exit 7" in msg and "compiling etcd" in msg and "module lookup disabled" in msg


def test_missing_go_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "build.sh"
    script.write_text("exit 2\n")
    monkeypatch.delenv("CDRIVER_ETCD_BIN_DIR", raising=False)
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(script))
    only_bash = tmp_path / "bin"
    only_bash.mkdir()
    (only_bash / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    monkeypatch.setenv("PATH", str(only_bash))
    with pytest.raises(BinariesError, match="Go was not found on PATH"):
        binaries.component_dirs(("etcd",), echo=False)


def test_build_output_dir_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "build.sh"
    script.write_text(f"echo {tmp_path}/empty-etcd >&2\necho etcd={tmp_path}/empty-etcd\n")
    (tmp_path / "empty-etcd").mkdir()
    monkeypatch.delenv("CDRIVER_ETCD_BIN_DIR", raising=False)
    monkeypatch.setenv("CDRIVER_KUBE_BUILD_SCRIPT", str(script))
    with pytest.raises(BinariesError, match="lacks executable etcd"):
        binaries.component_dirs(("etcd",), echo=False)


def test_default_build_script_is_in_the_source_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDRIVER_KUBE_BUILD_SCRIPT", raising=False)
    script = binaries.default_build_script()
    assert script.is_file() and script.parent.name == "kube" and script.parent.parent.name == "hack"
