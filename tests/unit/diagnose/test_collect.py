"""diagnose's collector only reads, records RBAC refusals per kind, and the CLI maps outcomes to exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from cdriver.diagnose.cli import command
from cdriver.diagnose.collect import CollectError, Collector
from cdriver.kube.errors import ApiError


class ReadOnlyApi:
    """Answers GET and LIST from fixed objects; any write fails the test."""

    server = "https://api.test:6443"

    def __init__(self, objects: dict[str, list[dict]], forbid: tuple[str, ...] = (), down: bool = False) -> None:
        self.objects = objects
        self.forbid = forbid
        self.down = down
        self.calls: list[tuple[str, str, str | None]] = []

    def list(self, res, namespace=None, label_selector=None, **_kw) -> dict:
        self.calls.append(("list", res.plural, namespace))
        if self.down:
            raise ApiError(0, "ConnectionRefused", "connection refused")
        if res.plural in self.forbid:
            raise ApiError(403, "Forbidden", f'{res.plural} is forbidden: User "dev" cannot list')
        items = [o for o in self.objects.get(res.plural, [])
                 if namespace is None or o["metadata"].get("namespace") == namespace]
        return {"items": items}

    def get_or_none(self, res, name, namespace=None) -> dict | None:
        self.calls.append(("get", res.plural, name))
        return None

    def __getattr__(self, name: str):
        raise AssertionError(f"diagnose must not call {name} (read-only)")


def controller(ns: str = "gpu-driver") -> dict:
    return {"metadata": {"name": "c", "namespace": ns, "labels": {"app.kubernetes.io/component": "controller"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [
                {"name": "IMEX_MODE", "value": "driverManaged"}]}]}}}}


def test_driver_namespace_is_found_from_the_controller_and_forbidden_kinds_are_recorded() -> None:
    api = ReadOnlyApi({"deployments": [controller()]}, forbid=("resourceslices",))
    data = Collector(api).collect("ml", None)
    assert data["driverNamespace"] == "gpu-driver"
    assert "cannot list" in data["forbidden"]["resourceslices"]
    assert ("list", "pods", "gpu-driver") in api.calls and ("list", "pods", "ml") in api.calls
    assert {verb for verb, _, _ in api.calls} == {"list", "get"}


def test_unreachable_api_server_cannot_run() -> None:
    with pytest.raises(CollectError, match="cannot read"):
        Collector(ReadOnlyApi({}, down=True)).collect("ml", None)


def test_cli_needs_a_target() -> None:
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 2
    assert "name a target" in result.output
    result = CliRunner().invoke(command, ["node", "x"])
    assert "unknown kind 'node'" in result.output


def test_cli_without_a_cluster_exits_could_not_run(tmp_path) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    result = CliRunner().invoke(command, ["cd", "x", "--kubeconfig", str(cfg)])
    assert result.exit_code == 2
    assert result.output.startswith("cdriver diagnose could not run:")


def test_help_says_read_only_and_the_kubectl_plugin_offers_diagnose() -> None:
    from cdriver.cli import cli
    from cdriver.diagnose.cli import plugin

    for group, args in ((cli, ["diagnose", "--help"]), (plugin, ["diagnose", "--help"])):
        result = CliRunner().invoke(group, args)
        assert result.exit_code == 0
        assert "Strictly read-only" in result.output and "3 only waits" in result.output


def test_a_fresh_process_runs_diagnose_to_a_clear_error() -> None:
    """`cdriver diagnose` in its own interpreter (as users run it) reaches the kubeconfig check:
    the collector's resources resolve without another module having been imported first."""
    done = subprocess.run(
        [sys.executable, "-m", "cdriver", "diagnose", "pod", "w", "-n", "ns", "--kubeconfig", "/nonexistent"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "kubeconfig '/nonexistent' does not exist" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
