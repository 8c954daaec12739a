"""`cdriver sim node` command line: options and their errors."""

from __future__ import annotations

from click.testing import CliRunner

from cdriver.cli import cli
from cdriver.sim.node import cli as node_cli


def test_node_group_lists_run_and_up() -> None:
    result = CliRunner().invoke(cli, ["sim", "node", "--help"])
    assert result.exit_code == 0
    assert "run" in result.output and "up" in result.output and "launch" not in result.output


def test_labels_must_be_key_value() -> None:
    assert node_cli._labels(("a/b=c", "empty=")) == {"a/b": "c", "empty": ""}
    result = CliRunner().invoke(cli, ["sim", "node", "run", "--name", "n", "--ip", "127.0.1.1", "--root", "/x",
                                       "--kubeconfig", "/nonexistent", "--label", "novalue"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output


def test_pki_dir_without_ca_key_is_refused(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["sim", "node", "up", "--base-dir", str(tmp_path), "--kubeconfig",
                                       "/nonexistent", "--pki-dir", str(tmp_path)])
    assert result.exit_code == 2 and "ca.key" in result.output


def test_up_rejects_more_nodes_than_addresses(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["sim", "node", "up", "--count", "10", "--first-index", "250",
                                       "--base-dir", str(tmp_path), "--kubeconfig", "/nonexistent"])
    assert result.exit_code == 2 and "127.X.Y.254" in result.output
