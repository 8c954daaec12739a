"""The kubelet plugin's nvidia-imex setting options: flags and environment reach its config;
a value nvidia-imex would refuse stops the plugin with the option, its range and its default."""

from __future__ import annotations

import pytest

from cdriver.errors import CdriverError
from cdriver.imex.settings import DEFAULT_SETTINGS
from cdriver.roles.kubelet_plugin import cli as plugin_cli

ARGS = ["--node-name", "n1"]


def config_of(*args: str):
    params = plugin_cli.command.make_context("kubelet-plugin", [*ARGS, *args]).params
    return plugin_cli.build_config(params, "")


def test_defaults_are_upstreams() -> None:
    assert config_of().imex_settings == DEFAULT_SETTINGS


def test_flags_and_environment_reach_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMEX_NODE_DISCONNECTED_GRACE_TIME", "300")
    monkeypatch.setenv("IMEX_WAIT_FOR_QUORUM", "NONE")
    cfg = config_of("--imex-log-level", "2")
    assert cfg.imex_settings.changed() == {
        "IMEX_NODE_DISCONNECTED_GRACE_TIME": "300", "LOG_LEVEL": "2", "IMEX_WAIT_FOR_QUORUM": "NONE"}


def test_a_bad_value_stops_the_plugin_naming_option_range_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-5")
    with pytest.raises(CdriverError) as err:
        config_of()
    assert str(err.value) == (
        "--imex-node-disconnected-grace-time (env IMEX_NODE_DISCONNECTED_GRACE_TIME)='-5' is not valid for "
        "IMEX_NODE_DISCONNECTED_GRACE_TIME: use -1 (wait indefinitely), 0 (clean up at once) or seconds from "
        "1 to 2147483647 (default -1)")


def test_the_command_reports_a_bad_value_as_an_error_not_a_traceback() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(plugin_cli.command, [*ARGS, "--imex-log-level", "9"])
    assert result.exit_code == 2
    assert "Error: --imex-log-level (env IMEX_LOG_LEVEL)='9' is not valid for LOG_LEVEL" in result.output
    assert "Traceback" not in result.output
