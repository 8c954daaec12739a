"""`cdriver sim cluster` without a running cluster: clear answers, no tracebacks."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from cdriver.sim.controlplane.cli import command


def invoke(*args: str) -> object:
    return CliRunner().invoke(command, list(args))


def test_status_without_cluster_says_stopped(tmp_path: Path) -> None:
    result = invoke("status", "--base-dir", str(tmp_path))
    assert result.exit_code == 1
    assert result.output.strip() == "stopped"


def test_down_without_cluster_is_a_no_op(tmp_path: Path) -> None:
    (tmp_path / "cluster.pid").write_text("999999999\n")  # a stale pid file
    result = invoke("down", "--base-dir", str(tmp_path))
    assert result.exit_code == 0
    assert "no local cluster is running" in result.output
    assert not (tmp_path / "cluster.pid").exists()


def test_up_refuses_while_another_holder_lives(tmp_path: Path) -> None:
    (tmp_path / "cluster.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "cluster").mkdir()
    result = invoke("up", "--detach", "--base-dir", str(tmp_path))
    assert result.exit_code != 0
    assert "already running" in result.output and "cdriver sim cluster down" in result.output
    assert (tmp_path / "cluster").is_dir()  # nothing of the live cluster was touched


def test_status_while_starting(tmp_path: Path) -> None:
    (tmp_path / "cluster.pid").write_text(f"{os.getpid()}\n")
    result = invoke("status", "--base-dir", str(tmp_path))
    assert result.exit_code == 1
    assert result.output.startswith("starting")
