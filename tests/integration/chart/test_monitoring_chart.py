"""The chart's monitoring objects: off by default; turned on, a PrometheusRule, PodMonitors that
select the driver's pods and label their targets as the rules expect, and the dashboard ConfigMap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdriver.api import constants
from tests.support.chart import by_kind, objects
from tests.support.monitoring import DASHBOARD_FILE, MONITORING_ON

MONITORING_KINDS = ("PrometheusRule", "PodMonitor")


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


def dashboards(docs: list[dict]) -> dict[str, dict]:
    return {name: cm for name, cm in by_kind(docs, "ConfigMap").items()
            if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1"}


def relabeled(monitor: dict) -> dict[str, dict]:
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return {r["targetLabel"]: r for r in endpoint["relabelings"]}


def test_defaults_render_no_monitoring_object(helm: Path) -> None:
    docs = objects(helm)
    assert not [d for d in docs if d["kind"] in MONITORING_KINDS]
    assert not dashboards(docs)


def test_monitoring_values_render_the_rule_the_pod_monitors_and_the_dashboard(helm: Path) -> None:
    docs = objects(helm, *MONITORING_ON, "--set", "monitoring.prometheusRule.labels.release=kps")
    (rule,) = by_kind(docs, "PrometheusRule").values()
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == "kps"
    assert [g["name"] for g in rule["spec"]["groups"]] == [
        "cdriver.controller", "cdriver.kubelet-plugin", "cdriver.imex-daemon", "cdriver.api-client"]
    (dashboard,) = dashboards(docs).values()
    assert json.loads(dashboard["data"]["cdriver-computedomains.json"]) == json.loads(DASHBOARD_FILE.read_text())


def test_pod_monitors_select_the_driver_pods_and_label_them_as_the_rules_expect(helm: Path) -> None:
    docs = objects(helm, *MONITORING_ON)
    monitors = by_kind(docs, "PodMonitor")
    assert set(monitors) == {"rel-cdriver-controller", "rel-cdriver-kubelet-plugin", "rel-cdriver-imex-daemon"}
    pods = {"controller": by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT],
            "kubelet-plugin": by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]}
    for component, workload in pods.items():
        monitor = monitors[f"rel-cdriver-{component}"]
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(), component
    for component in ("controller", "kubelet-plugin", "imex-daemon"):
        monitor = monitors[f"rel-cdriver-{component}"]
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        labels = relabeled(monitor)
        assert labels["job"]["replacement"] == "cdriver" and labels["component"]["replacement"] == component
        assert labels["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    daemons = monitors["rel-cdriver-imex-daemon"]
    assert daemons["spec"]["selector"]["matchExpressions"] == [
        {"key": constants.LABEL_COMPUTE_DOMAIN, "operator": "Exists"}]
    assert relabeled(daemons)["compute_domain"]["sourceLabels"] == [
        "__meta_kubernetes_pod_label_resource_nvidia_com_computeDomain"]


def test_host_managed_mode_has_no_daemon_pod_monitor(helm: Path) -> None:
    docs = objects(helm, *MONITORING_ON, "--set", "imex.mode=hostManaged",
                   "--set", "featureGates.HostManagedIMEXDaemon=true")
    assert set(by_kind(docs, "PodMonitor")) == {"rel-cdriver-controller", "rel-cdriver-kubelet-plugin"}


def test_another_job_reaches_the_pod_monitors_and_the_dashboard(helm: Path) -> None:
    docs = objects(helm, *MONITORING_ON, "--set", "monitoring.job=gpu-dra")
    assert {relabeled(m)["job"]["replacement"] for m in by_kind(docs, "PodMonitor").values()} == {"gpu-dra"}
    (dashboard,) = dashboards(docs).values()
    text = dashboard["data"]["cdriver-computedomains.json"]
    assert 'job=\\"gpu-dra\\"' in text and 'job=\\"cdriver\\"' not in text


def test_monitoring_values_are_checked_by_the_schema(helm: Path) -> None:
    from tests.support.chart import render

    out = render(helm, "--set", "monitoring.alerts.prepareWaiting.for=5min")
    assert out.returncode != 0 and "/monitoring/alerts/prepareWaiting/for" in out.stderr
    out = render(helm, "--set", "monitoring.alerts.prepareWaitng.for=5m")
    assert out.returncode != 0 and "prepareWaitng" in out.stderr
