"""Host-managed readiness check and the plugin's start-up settings."""

from __future__ import annotations

import os
import re
from pathlib import Path

import click
import pytest

from cdriver.api.imex_mode import ImexConfigError
from cdriver.durations import parse_duration as parse_seconds
from cdriver.imex.config import IMEX_CTL_BINARY
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from cdriver.roles.kubelet_plugin.cli import build_config
from cdriver.roles.kubelet_plugin.discovery import DiscoveryError, check_driver_version
from cdriver.roles.kubelet_plugin.host_imex import check_host_imex, host_socket

SOCK = DEFAULT_HOST_IMEX_SOCKET


def install_ctl(root: Path, output: str, rc: int = 0, subdir: str = "usr/bin") -> Path:
    """A driver root whose nvidia-imex-ctl records its arguments and answers `output`."""
    ctl = root / subdir / IMEX_CTL_BINARY
    ctl.parent.mkdir(parents=True, exist_ok=True)
    ctl.write_text(f"#!/bin/sh\necho \"$@\" > {root}/args\nprintf '%s\\n' '{output}'\nexit {rc}\n")
    ctl.chmod(0o755)
    return ctl


def test_ready_host_daemon(tmp_path: Path):
    install_ctl(tmp_path, "READY")
    assert check_host_imex(tmp_path, SOCK) == ""
    assert (tmp_path / "args").read_text().split() == ["-q", f"--u={tmp_path}{SOCK}"]


def test_not_ready_names_socket_and_output(tmp_path: Path):
    install_ctl(tmp_path, "NOT_READY")
    problem = check_host_imex(tmp_path, SOCK)
    assert problem.startswith("host nvidia-imex daemon readiness check failed")
    assert str(host_socket(tmp_path, SOCK)) in problem and "NOT_READY" in problem


def test_failing_ctl_names_exit_status(tmp_path: Path):
    install_ctl(tmp_path, "connect: No such file or directory", rc=1, subdir="opt/bin")
    problem = check_host_imex(tmp_path, SOCK)
    assert "exited 1" in problem and "No such file or directory" in problem


def test_missing_ctl(tmp_path: Path):
    problem = check_host_imex(tmp_path, SOCK)
    assert "nvidia-imex-ctl not found under driver root" in problem and "installed" in problem


@pytest.mark.parametrize("output,ready", [
    ("READY", True), ("IMEX daemon status: READY\n", True), ("connecting...\nREADY", True),
    ("NOT_READY", False), ("NOT READY", False), ("", False), ("UNAVAILABLE", False),
])
def test_output_containing_ready_counts(output: str, ready: bool):
    from cdriver.roles.kubelet_plugin.host_imex import says_ready

    assert says_ready(0, output) is ready
    assert says_ready(1, output) is False


def _shell_root(root: Path) -> None:
    """Copy /bin/sh and the libraries it loads into ``root`` so it runs chrooted there."""
    import shutil
    import subprocess

    sh = Path(os.path.realpath("/bin/sh"))
    libs = [Path(p) for p in re.findall(r"(/\S+\.so[.\d]*)", subprocess.run(
        ["ldd", str(sh)], capture_output=True, text=True, check=True).stdout)]
    for src in [sh, *libs]:
        for path in {src, Path(os.path.realpath(src))}:
            dest = root / str(path).lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(path), dest)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin/sh").exists():
        shutil.copy2(sh, root / "bin/sh")


def test_ctl_runs_chrooted_with_the_hosts_socket_path(tmp_path: Path):
    _shell_root(tmp_path)
    ctl = tmp_path / "usr/bin" / IMEX_CTL_BINARY
    ctl.parent.mkdir(parents=True, exist_ok=True)
    ctl.write_text("#!/bin/sh\necho \"$@\" > /args\necho 'IMEX status: READY'\n")
    ctl.chmod(0o755)
    assert check_host_imex(tmp_path, SOCK) == ""
    # Inside the chroot the socket is the host's own path, not one translated into the root.
    assert (tmp_path / "args").read_text().split() == ["-q", f"--u={SOCK}"]


def test_driver_version_floor():
    check_driver_version("570.158.01")
    check_driver_version("580.65.06")
    with pytest.raises(DiscoveryError, match="IMEXDaemonsWithDNSNames=false"):
        check_driver_version("570.148.08")
    with pytest.raises(DiscoveryError):
        check_driver_version("garbage")


def opts(**over):
    base = {"node_name": "n1", "namespace": "drv", "kubeconfig": None, "cdi_root": "/var/run/cdi",
            "driver_root": "/", "container_driver_root": "", "registrar_dir": "/reg", "plugins_dir": "/plug",
            "healthcheck_port": -1, "http_endpoint": "", "metrics_path": "/metrics",
            "imex_mode": "driverManaged", "imex_isolation": "domain", "imex_host_socket_path": SOCK,
            "gpu_clique_label_enabled": False, "imex_config_template": None, "prepare_timeout": "30s",
            "cleanup_interval": "10m", "host_probe_interval": "1s"}
    base.update(over)
    return base


def test_config_paths_follow_the_flags():
    cfg = build_config(opts(), "")
    assert cfg.dra_socket == Path("/plug/compute-domain.nvidia.com/dra.sock")
    assert cfg.registration_socket == Path("/reg/compute-domain.nvidia.com-reg.sock")
    assert cfg.checkpoint_path == Path("/plug/compute-domain.nvidia.com/checkpoint.json")
    assert cfg.prepare_timeout == 30 and cfg.cleanup_interval == 600
    assert not cfg.host_managed and cfg.use_cliques


def test_host_mode_needs_its_gate_and_turns_daemon_gates_off():
    with pytest.raises(ImexConfigError, match="HostManagedIMEXDaemon"):
        build_config(opts(imex_mode="hostManaged"), "")
    cfg = build_config(opts(imex_mode="hostManaged"), "HostManagedIMEXDaemon=true")
    assert cfg.host_managed and not cfg.use_cliques


def test_channel_isolation_is_rejected():
    with pytest.raises(ImexConfigError, match="not supported yet"):
        build_config(opts(imex_isolation="channel"), "")


def test_prepare_timeout_must_stay_below_kubelet_deadline():
    with pytest.raises(click.BadParameter, match="45s"):
        build_config(opts(prepare_timeout="45s"), "")


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("1m30s", 90), ("500ms", 0.5), ("2", 2)])
def test_parse_seconds(text, seconds):
    assert parse_seconds(text, "--x") == seconds


@pytest.mark.parametrize("text", ["", "abc", "-1", "0", "5x"])
def test_parse_seconds_rejects(text):
    with pytest.raises(click.BadParameter):
        parse_seconds(text, "--x")


def test_bad_http_endpoint_names_the_flag():
    from cdriver.errors import CdriverError

    with pytest.raises(CdriverError, match="--http-endpoint 'localhost'.*HOST:PORT"):
        build_config(opts(http_endpoint="localhost"), "")
    assert build_config(opts(http_endpoint=":8081"), "").http_endpoint == ":8081"
