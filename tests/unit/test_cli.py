"""The CLI frame: help, version, common options and their env twins."""

from __future__ import annotations

import json
import platform

from click.testing import CliRunner

import cdriver
from cdriver.cli import cli


def test_help_lists_version() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "version" in result.output
    assert "--feature-gates" in result.output


def test_version_reports_package_python_and_kubernetes() -> None:
    result = CliRunner().invoke(cli, ["version", "--json"])
    assert result.exit_code == 0
    info = json.loads(result.output)
    assert info["cdriver"] == cdriver.__version__
    assert info["kubernetes"] == "1.37"
    assert info["python"].startswith("3.")
    assert info["machine"] == platform.machine(), "the architecture the process runs as"


def test_common_options_have_env_twins() -> None:
    result = CliRunner().invoke(cli, ["version"], env={"LOG_FORMAT": "bogus"})
    assert result.exit_code == 2
    assert "bogus" in result.output


def test_unknown_subcommand_is_an_error() -> None:
    result = CliRunner().invoke(cli, ["no-such-role"])
    assert result.exit_code != 0
    assert "No such command" in result.output
