"""The plugin DaemonSet's update: per-pod sockets and a surge strategy from Kubernetes 1.33 (or as
the values say), readiness on kubelet's registration, and a shutdown grace inside the pod's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chart import by_kind, objects, render

PLUGIN_DS = "dra-driver-nvidia-gpu-kubelet-plugin"
SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
WHOLE = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


def plugin(helm: Path, *args: str) -> dict:
    return by_kind(objects(helm, *args), "DaemonSet")[PLUGIN_DS]


def env(ds: dict) -> dict[str, dict]:
    return {e["name"]: e for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(("args", "rolling"), [
    ((), True),  # 1.37
    (("--kube-version", "1.33.0"), True),
    (("--kube-version", "1.32.4"), False),  # a 1.32 kubelet cannot hold two instances of a driver
    (("--set", "kubeletPlugin.rollingUpdate=false"), False),
    (("--kube-version", "1.32.4", "--set", "kubeletPlugin.rollingUpdate=true"), True),
])
def test_per_pod_sockets_and_a_surge_update_where_kubelets_hold_two_instances(helm: Path, args: tuple[str, ...],
                                                                               rolling: bool) -> None:
    ds = plugin(helm, *args)
    assert ds["spec"]["updateStrategy"] == (SURGE if rolling else WHOLE)
    pod_uid = env(ds).get("POD_UID")
    if rolling:
        assert pod_uid == {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
    else:
        assert pod_uid is None


def test_a_strategy_given_in_the_values_is_kept(helm: Path) -> None:
    ds = plugin(helm, "--set", "kubeletPlugin.updateStrategy.type=OnDelete")
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert "POD_UID" in env(ds)


def test_ready_once_registered_and_calls_finish_within_the_pods_grace(helm: Path) -> None:
    spec = plugin(helm, "--set", "kubeletPlugin.terminationGracePeriodSeconds=60")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["readinessProbe"]["grpc"] == {"port": 51515, "service": "readiness"}
    assert spec["terminationGracePeriodSeconds"] == 60
    assert env({"spec": {"template": {"spec": spec}}})["SHUTDOWN_GRACE"]["value"] == "50s"
    assert "readinessProbe" not in plugin(helm, "--set", "kubeletPlugin.healthcheckPort=0")[
        "spec"]["template"]["spec"]["containers"][0]


def test_a_wrong_rolling_update_value_is_refused_naming_the_choices(helm: Path) -> None:
    out = render(helm, "--set", "kubeletPlugin.rollingUpdate=sometimes")
    assert out.returncode != 0
    assert "kubeletPlugin.rollingUpdate must be true, false or auto, not sometimes" in out.stderr
