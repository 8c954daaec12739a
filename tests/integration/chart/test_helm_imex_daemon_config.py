"""The chart's nvidia-imex settings (imex.daemonConfig.*): upstream's defaults, values set on the
command line or in a values file reach the kubelet plugin, and `helm template` refuses a value
nvidia-imex would not accept with a message naming the key, what it accepts and its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.imex.settings import TUNABLES
from tests.support.chart import by_kind, objects, render

HOST_MODE = ["--set", "imex.mode=hostManaged", "--set", "featureGates.HostManagedIMEXDaemon=true"]


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


def plugin_env(helm: Path, *args: str) -> dict[str, str]:
    plugin = by_kind(objects(helm, *args), "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]
    return {e["name"]: e.get("value") for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}


def imex_env(helm: Path, *args: str) -> dict[str, str]:
    env = plugin_env(helm, *args)
    return {t.key: env[t.env] for t in TUNABLES}


def test_defaults_are_upstreams(helm: Path) -> None:
    assert imex_env(helm) == {"IMEX_NODE_DISCONNECTED_GRACE_TIME": "-1", "LOG_LEVEL": "4",
                              "IMEX_WAIT_FOR_QUORUM": "RECOVERY"}


def test_values_set_on_the_command_line_and_in_a_file_reach_the_plugin(helm: Path, tmp_path: Path) -> None:
    assert imex_env(helm, "--set", "imex.daemonConfig.nodeDisconnectedGraceTime=300",
                    "--set", "imex.daemonConfig.logLevel=2", "--set", "imex.daemonConfig.waitForQuorum=NONE") == {
        "IMEX_NODE_DISCONNECTED_GRACE_TIME": "300", "LOG_LEVEL": "2", "IMEX_WAIT_FOR_QUORUM": "NONE"}
    values = tmp_path / "values.yaml"  # a values file's numbers arrive as floats
    values.write_text("imex:\n  daemonConfig:\n    nodeDisconnectedGraceTime: 2147483647\n    logLevel: '0'\n")
    assert imex_env(helm, "-f", str(values)) == {
        "IMEX_NODE_DISCONNECTED_GRACE_TIME": "2147483647", "LOG_LEVEL": "0", "IMEX_WAIT_FOR_QUORUM": "RECOVERY"}


GRACE = ("use -1 (wait indefinitely), 0 (clean up at once) or seconds from 1 to 2147483647 (default -1)")


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "imex.daemonConfig.nodeDisconnectedGraceTime=-2"],
     f"imex.daemonConfig.nodeDisconnectedGraceTime=-2 is not valid: {GRACE}"),
    (["--set", "imex.daemonConfig.nodeDisconnectedGraceTime=2147483648"],
     f"imex.daemonConfig.nodeDisconnectedGraceTime=2147483648 is not valid: {GRACE}"),
    (["--set", "imex.daemonConfig.nodeDisconnectedGraceTime=5m"],
     f"imex.daemonConfig.nodeDisconnectedGraceTime=\"5m\" is not valid: {GRACE}"),
    (["--set-json", "imex.daemonConfig.nodeDisconnectedGraceTime=1.5"],
     f"imex.daemonConfig.nodeDisconnectedGraceTime=1.5 is not valid: {GRACE}"),
    (["--set", "imex.daemonConfig.logLevel=5"],
     "imex.daemonConfig.logLevel=5 is not valid: use an integer from 0 (logging off) to 4 (INFO and above) "
     "(default 4)"),
    (["--set", "imex.daemonConfig.logLevel=true"], "imex.daemonConfig.logLevel=true is not valid"),
    (["--set", "imex.daemonConfig.waitForQuorum=recovery"],
     "imex.daemonConfig.waitForQuorum=\"recovery\" is not valid: use RECOVERY (after an unsafe stop, wait for "
     "the nodes that had imported) or NONE (default RECOVERY)"),
    (["--set", "imex.daemonConfig.graceTime=60"], "additional properties 'graceTime' not allowed"),
    ([*HOST_MODE, "--set", "imex.daemonConfig.nodeDisconnectedGraceTime=60"],
     "imex.daemonConfig.nodeDisconnectedGraceTime=60 applies to the IMEX daemons the driver runs: with "
     "imex.mode=hostManaged set it in the host's nvidia-imex config"),
])
def test_a_value_nvidia_imex_refuses_fails_the_render_with_its_range_and_default(
        helm: Path, args: list[str], message: str) -> None:
    out = render(helm, *args)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_host_managed_mode_renders_at_the_defaults(helm: Path) -> None:
    assert imex_env(helm, *HOST_MODE)["IMEX_NODE_DISCONNECTED_GRACE_TIME"] == "-1"
