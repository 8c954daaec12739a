"""The chart takes a values file written for the upstream NVIDIA chart: same meaning, or a
failure naming the key and what to do instead; and its kubelet plugin DaemonSet defaults."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.api.constants import DEVICE_CLASS_DEFAULT_CHANNEL
from cdriver.api.imex_mode import IMEX_MODE_HOST_MANAGED
from cdriver.checkout import CHART_DIR
from tests.support.chart import NAMESPACE, by_kind, dry_run_render, objects, render

UPSTREAM_VALUES = Path(__file__).parent / "data" / "upstream-values.yaml"


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


def env_of(container: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_upstream_values_file_keeps_its_meaning(helm: Path) -> None:
    docs = objects(helm, "-f", str(UPSTREAM_VALUES))
    plugin_pod = by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]["spec"]["template"]
    plugin = plugin_pod["spec"]["containers"][0]
    penv = env_of(plugin)
    assert penv["LOG_VERBOSITY"] == "4"
    assert penv["IMEX_MODE"] == IMEX_MODE_HOST_MANAGED
    assert penv["IMEX_HOST_SOCKET_PATH"] == "/run/nvidia-imex/ctl.sock"
    assert penv["OWN_CLIQUE_LABEL"] == "true"
    assert penv["HEALTHCHECK_PORT"] == "51600"
    # the health service listens where kubelet's probes dial
    assert [e.get("valueFrom") for e in plugin["env"] if e["name"] == "HEALTHCHECK_ADDRESS"] == [
        {"fieldRef": {"fieldPath": "status.podIP"}}]
    assert penv["HTTP_ENDPOINT"] == ":8181"
    assert penv["EXTRA_PLUGIN"] == "1"
    assert "DRAListTypeAttributes=true" in penv["FEATURE_GATES"]
    assert plugin["resources"] == {"limits": {"memory": "512Mi"}}
    assert plugin["livenessProbe"]["grpc"] == {"port": 51600, "service": "liveness"}
    # the values' annotations, and Prometheus' (metrics.podAnnotations.enabled) for the metrics port
    assert plugin_pod["metadata"]["annotations"] == {"team": "gpu-platform", "plugin-note": "kept",
                                                     **scrape_annotations("8181")}
    # Host-managed: no daemon DeviceClass.
    assert set(by_kind(docs, "DeviceClass")) == {DEVICE_CLASS_DEFAULT_CHANNEL}

    controller_pod = by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT]["spec"]["template"]
    controller = controller_pod["spec"]["containers"][0]
    cenv = env_of(controller)
    assert cenv["LEADER_ELECTION_LEASE_DURATION"] == "15s"
    assert cenv["LEADER_ELECTION_RENEW_DEADLINE"] == "10s"
    assert cenv["HTTP_ENDPOINT"] == ":9090"
    assert cenv["EXTRA_CONTROLLER"] == "1"
    assert controller["ports"] == [{"name": "metrics", "containerPort": 9090}]
    assert controller["resources"] == {"requests": {"cpu": "50m"}}
    assert controller_pod["metadata"]["annotations"] == {"team": "gpu-platform", "scrape": "true",
                                                         **scrape_annotations("9090")}


def scrape_annotations(port: str) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"}


def test_durations_reach_the_controller_in_a_form_it_parses(helm: Path) -> None:
    from cdriver.durations import parse_duration

    docs = objects(helm, "-f", str(UPSTREAM_VALUES))
    deployment = by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT]
    cenv = env_of(deployment["spec"]["template"]["spec"]["containers"][0])
    assert parse_duration(cenv["LEADER_ELECTION_LEASE_DURATION"], "lease") == 15
    assert parse_duration(cenv["LEADER_ELECTION_RETRY_PERIOD"], "retry") == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "serviceAccount.name=gpu-sa"], 'serviceAccount.name="gpu-sa" is not supported by cdriver: '
                                             "cdriver names its ServiceAccounts"),
    (["--set", "serviceAccount.create=false"], "serviceAccount.create=false is not supported by cdriver"),
    (["--set", "namespaceOverride=elsewhere"], "install with --namespace elsewhere"),
    (["--set", "resources.gpus.enabled=true"], "resources.gpus.enabled=true is not supported by cdriver: "
                                               "cdriver serves ComputeDomains only"),
    (["--set", "webhook.enabled=true"], "webhook.enabled=true is not supported by cdriver"),
    (["--set", "controller.metrics.profilePath=/debug"], "remove controller.metrics.profilePath"),
    (["--set", "image.repository=registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"],
     "is the upstream driver's image: remove image.repository and image.tag"),
    (["--set", "logVerbosity=loud"], "logVerbosity"),
    (["--set", "controller.leaderElection.leaseDuration=fifteen"], "leaseDuration"),
])
def test_upstream_keys_without_equivalent_fail_naming_key_and_fix(helm: Path, args: list[str],
                                                                   message: str) -> None:
    out = render(helm, *args)
    assert out.returncode != 0
    assert message in out.stderr


def test_kubelet_plugin_daemonset_defaults(helm: Path) -> None:
    pod = by_kind(objects(helm), "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {t["matchExpressions"][0]["key"] for t in terms}
    assert {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"} <= keys
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    (init,) = pod["initContainers"]
    assert "libnvidia-ml.so.1" in init["args"][0]
    container = pod["containers"][0]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["driver-root"]["mountPropagation"] == "HostToContainer"
    assert container["livenessProbe"]["grpc"] == {"port": 51515, "service": "liveness"}
    assert env_of(container)["HEALTHCHECK_PORT"] == "51515"
    # IMEX daemon pods are not capped unless asked.
    controller = by_kind(objects(helm), "Deployment")[constants.CONTROLLER_DEPLOYMENT]["spec"]["template"]["spec"]
    cenv = env_of(controller["containers"][0])
    assert cenv["DAEMON_CPU"] == "" and cenv["DAEMON_MEMORY"] == ""


def test_health_port_zero_turns_probes_off(helm: Path) -> None:
    pod = by_kind(objects(helm, "--set", "kubeletPlugin.healthcheckPort=0"),
                  "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]["spec"]["template"]["spec"]
    assert "livenessProbe" not in pod["containers"][0]


def test_plain_helm_template_needs_no_kube_version(helm: Path) -> None:
    out = subprocess.run([str(helm), "template", "rel", str(CHART_DIR), "--namespace", NAMESPACE],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_upstream_values_render_passes_server_side_dry_run(helm: Path, raw) -> None:
    dry_run_render(helm, raw, "-f", str(UPSTREAM_VALUES))
