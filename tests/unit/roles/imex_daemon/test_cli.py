"""`cdriver imex-daemon check` (the probe) and the start-up errors of `run`, as processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdriver.api.constants import (
    ENV_CD_UUID,
    ENV_CLIQUE_ID,
    ENV_MAX_NODES,
    ENV_NODE_NAME,
    ENV_POD_IP,
    ENV_POD_NAME,
    ENV_POD_NAMESPACE,
    ENV_POD_UID,
)
from cdriver.roles.imex_daemon.cli import ENV_IMEXD_DIR, IMEX_CHECK_NOOP_MESSAGE
from cdriver.roles.imex_daemon.inputs import IMEXD_STATE_NAME


def fake_ctl(tmp_path: Path, output: str, code: int = 0) -> Path:
    """An nvidia-imex-ctl that records its arguments and prints `output`."""
    script = tmp_path / "nvidia-imex-ctl"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\nprintf '{output}'\nexit {code}\n")
    script.chmod(0o755)
    return script


def run_cli(tmp_path: Path, *args: str, clique: str = "uuid.0", **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, ENV_CLIQUE_ID: clique, ENV_IMEXD_DIR: str(tmp_path / "imexd"), **env}
    return subprocess.run([sys.executable, "-m", "cdriver", "imex-daemon", *args], env=full,
                          capture_output=True, text=True, timeout=60)


def test_check_with_empty_clique_is_a_noop_success(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "check", clique="")
    assert result.returncode == 0
    assert result.stdout == f"{IMEX_CHECK_NOOP_MESSAGE}\n"


def test_check_passes_on_exactly_ready_and_queries_the_rendered_config(tmp_path: Path) -> None:
    ctl = fake_ctl(tmp_path, "READY\\n")
    result = run_cli(tmp_path, "--imex-ctl-binary", str(ctl), "check")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    assert (tmp_path / "args").read_text().split() == ["-c", str(tmp_path / "imexd" / "imexd.cfg"), "-q"]


@pytest.mark.parametrize("output", ["READY READY\\n", "WAITING_FOR_PEERS\\n", "ready\\n", ""])
def test_check_fails_on_any_other_answer(tmp_path: Path, output: str) -> None:
    ctl = fake_ctl(tmp_path, output)
    result = run_cli(tmp_path, "--imex-ctl-binary", str(ctl), "check")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: IMEX daemon not ready:")


def test_check_with_wait_passes_once_imex_turns_ready(tmp_path: Path) -> None:
    """The startup probe's form: asks again until READY instead of failing on the first answer."""
    script = tmp_path / "nvidia-imex-ctl"
    script.write_text(f"#!/bin/sh\necho x >> {tmp_path}/calls\n"
                      f"if [ $(wc -l < {tmp_path}/calls) -ge 3 ]; then echo READY; else echo STARTING; fi\n")
    script.chmod(0o755)
    assert run_cli(tmp_path, "--imex-ctl-binary", str(script), "check").returncode == 1
    result = run_cli(tmp_path, "--imex-ctl-binary", str(script), "check", "--wait", "30")
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "calls").read_text().split()) == 3


def test_check_with_wait_gives_up_with_the_last_answer(tmp_path: Path) -> None:
    ctl = fake_ctl(tmp_path, "STARTING\n")
    result = run_cli(tmp_path, "--imex-ctl-binary", str(ctl), "check", "--wait", "0.6")
    assert result.returncode == 1
    assert "IMEX daemon not ready: 'STARTING\\n'" in result.stderr


def test_check_fails_when_the_ctl_fails(tmp_path: Path) -> None:
    ctl = fake_ctl(tmp_path, "connection refused", code=3)
    result = run_cli(tmp_path, "--imex-ctl-binary", str(ctl), "check")
    assert result.returncode == 1
    assert "IMEX daemon check failed: error running nvidia-imex-ctl (exit 3): connection refused" in result.stderr


def test_check_reports_a_blocking_port_conflict_without_asking_the_wrong_daemon(tmp_path: Path) -> None:
    from cdriver.roles.imex_daemon import failures

    ctl = fake_ctl(tmp_path, "READY\\n")
    (tmp_path / "imexd").mkdir()
    failures.write_state(tmp_path / "imexd" / IMEXD_STATE_NAME, failures.PHASE_PORT_CONFLICT,
                         "IMEX port 50000 on pod IP 10.0.0.1 is already in use by process 7")
    result = run_cli(tmp_path, "--imex-ctl-binary", str(ctl), "check")
    assert result.returncode == 1
    assert "IMEX port 50000 on pod IP 10.0.0.1 is already in use by process 7" in result.stderr
    assert not (tmp_path / "args").exists()


def test_run_reports_bad_inputs_without_a_traceback(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "run", **{ENV_CD_UUID: "u", ENV_MAX_NODES: "0", ENV_POD_IP: "x",
                                         ENV_NODE_NAME: "", ENV_POD_NAME: "p", ENV_POD_NAMESPACE: "n",
                                         ENV_POD_UID: "i"})
    assert result.returncode == 1
    assert "MAX_NODES_PER_IMEX_DOMAIN=0" in result.stderr and "POD_IP='x'" in result.stderr
    assert "Traceback" not in result.stderr
