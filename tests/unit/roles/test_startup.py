"""`--kube-api-qps`/`--kube-api-burst` (and their environment twins) of every role reach the
role's API client with the role's defaults; impossible limits stop the role before it starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click
import pytest

from cdriver.errors import CdriverError
from cdriver.kube.ratelimit import TokenBucket
from cdriver.roles.controller import cli as controller_cli
from cdriver.roles.controller import settings as controller_settings
from cdriver.roles.imex_daemon import cli as daemon_cli
from cdriver.roles.imex_daemon import inputs as daemon_inputs
from cdriver.roles.kubelet_plugin import cli as plugin_cli
from cdriver.roles.kubelet_plugin import config as plugin_config

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def params(command: click.Command, args: list[str]) -> dict:
    return command.make_context(command.name or "cmd", list(args)).params  # click consumes the list


def controller_limiter(tmp_path: Path, *args: str) -> TokenBucket | None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    runner, http = controller_cli._build(params(controller_cli.command, ["--kubeconfig", str(kubeconfig), *args]),
                                         {})
    assert http is None
    return runner.raw.rate_limiter


def test_controller_flags_reach_its_client(tmp_path: Path) -> None:
    limiter = controller_limiter(tmp_path, "--kube-api-qps", "20", "--kube-api-burst", "30")
    assert limiter is not None and (limiter.qps, limiter.burst) == (20, 30)


def test_controller_defaults_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limiter = controller_limiter(tmp_path)
    assert limiter is not None and (limiter.qps, limiter.burst) == (
        controller_settings.DEFAULT_KUBE_API_QPS, controller_settings.DEFAULT_KUBE_API_BURST)
    monkeypatch.setenv("KUBE_API_QPS", "-1")
    assert controller_limiter(tmp_path) is None


def test_controller_refuses_a_burst_of_zero_with_a_positive_qps(tmp_path: Path) -> None:
    with pytest.raises(CdriverError, match="--kube-api-burst 0 must be at least 1"):
        controller_limiter(tmp_path, "--kube-api-burst", "0")


PLUGIN_ARGS = ["--node-name", "n1"]


def test_plugin_flags_and_environment_reach_its_config(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = plugin_cli.build_config(params(plugin_cli.command, PLUGIN_ARGS), "")
    assert (cfg.kube_api_qps, cfg.kube_api_burst) == (
        plugin_config.DEFAULT_KUBE_API_QPS, plugin_config.DEFAULT_KUBE_API_BURST)
    monkeypatch.setenv("KUBE_API_QPS", "3.5")
    monkeypatch.setenv("KUBE_API_BURST", "7")
    cfg = plugin_cli.build_config(params(plugin_cli.command, PLUGIN_ARGS), "")
    assert (cfg.kube_api_qps, cfg.kube_api_burst) == (3.5, 7)
    cfg = plugin_cli.build_config(params(plugin_cli.command, [*PLUGIN_ARGS, "--kube-api-qps", "0"]), "")
    assert cfg.kube_api_qps == 0  # client-go's default applies when the client is built
    with pytest.raises(CdriverError, match="--kube-api-burst -3"):
        plugin_cli.build_config(params(plugin_cli.command, [*PLUGIN_ARGS, "--kube-api-burst", "-3"]), "")


DAEMON_IDENTITY = daemon_inputs.RawInputs(cd_uid="uid-1", pod_name="p", pod_namespace="drv")


def daemon_settings(args: list[str]) -> daemon_inputs.Settings:
    given = params(daemon_cli.command, args)
    return daemon_inputs.parse_settings(replace(
        DAEMON_IDENTITY, kube_api_qps=given["kube_api_qps"], kube_api_burst=given["kube_api_burst"]))


def test_daemon_flags_reach_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = daemon_settings([])
    assert (settings.kube_api_qps, settings.kube_api_burst) == (
        daemon_inputs.DEFAULT_KUBE_API_QPS, daemon_inputs.DEFAULT_KUBE_API_BURST)
    settings = daemon_settings(["--kube-api-qps", "2", "--kube-api-burst", "4"])
    assert (settings.kube_api_qps, settings.kube_api_burst) == (2, 4)
    monkeypatch.setenv("KUBE_API_BURST", "0")
    with pytest.raises(daemon_inputs.InputError, match="--kube-api-burst 0 must be at least 1"):
        daemon_settings([])


@pytest.mark.parametrize("command", [controller_cli.command, plugin_cli.command, daemon_cli.command])
def test_every_role_documents_both_flags_with_their_environment_names(command: click.Command) -> None:
    text = command.get_help(click.Context(command))
    for name in ("--kube-api-qps", "KUBE_API_QPS", "--kube-api-burst", "KUBE_API_BURST"):
        assert name in text
