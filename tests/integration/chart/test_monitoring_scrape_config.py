"""The plain scrape config shipped in the chart: a valid standalone `scrape_configs` list that
Prometheus accepts beside the rules file, producing the target labels the rules select on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.monitoring import (
    RULES_FILE,
    SCRAPE_CONFIG_FILE,
    alerting_rules,
    known_series,
    promtool_ok,
    series_named,
    write_yaml,
)

TARGET_LABELS = {"namespace", "pod", "node", "component", "compute_domain"}


@pytest.fixture(scope="module")
def promtool() -> Path:
    from cdriver.sim.controlplane.binaries import prometheus_binaries

    return prometheus_binaries(echo=False).promtool


def scrape_configs() -> list[dict]:
    return yaml.safe_load(SCRAPE_CONFIG_FILE.read_text())


def test_prometheus_accepts_the_scrape_config_with_the_rules(promtool: Path, tmp_path: Path) -> None:
    configs = scrape_configs()
    configs[0]["kubernetes_sd_configs"][0]["kubeconfig_file"] = str(tmp_path / "kubeconfig")
    shutil.copy(RULES_FILE, tmp_path / RULES_FILE.name)
    config = write_yaml(tmp_path / "prometheus.yml", {"rule_files": [RULES_FILE.name], "scrape_configs": configs})
    out = promtool_ok(promtool, "check", "config", config)
    assert "SUCCESS: 15 rules found" in out


def test_the_scrape_config_is_one_job_over_the_driver_namespace_with_the_rules_target_labels() -> None:
    (job,) = scrape_configs()
    assert job["job_name"] == "cdriver"
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"]["names"] == ["cdriver-system"]
    relabels = job["relabel_configs"]
    assert relabels[0] == {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                           "action": "keep", "regex": "true"}
    assert TARGET_LABELS <= {r.get("target_label") for r in relabels}


def test_rules_select_the_scrape_configs_job_and_only_known_series() -> None:
    (job,) = scrape_configs()
    for name, rule in alerting_rules(yaml.safe_load(RULES_FILE.read_text())).items():
        assert f'job="{job["job_name"]}"' in rule["expr"], name
        unknown = sorted(s for s in series_named(rule["expr"]) if not known_series(s))
        assert not unknown, f"{name} names {unknown}, which no role exposes"


def _pod(name: str, node: str, ip: str, labels: dict[str, str], port: int | None) -> dict:
    annotations = {} if port is None else {
        "prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
    ports = [{"name": "metrics", "containerPort": port or 9000}, {"name": "health", "containerPort": 51515}]
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cdriver:test", "ports": ports}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}


def test_service_discovery_labels_the_driver_pods_as_the_rules_expect(
        promtool: Path, cluster, raw, namespace: str, tmp_path: Path) -> None:
    """The relabeling on a real API server's pods: the driver's annotated pods become one target
    each, on the annotated port, with the rules' labels; other pods are dropped."""
    from cdriver.kube.resources import RESOURCES

    node = f"{namespace}-node"
    component = "dra-driver-nvidia-gpu-component"
    raw.create(RESOURCES["nodes"], {"metadata": {"name": node}})
    try:
        pods = [_pod("ctl", node, "10.9.0.1", {component: "controller"}, 8080),
                _pod("plugin", node, "10.9.0.2", {component: "kubelet-plugin"}, 8081),
                _pod("daemon", node, "fd00::3", {"resource.nvidia.com/computeDomain": "uid-a"}, 8082),
                _pod("unannotated", node, "10.9.0.4", {component: "kubelet-plugin"}, None),
                _pod("other", node, "10.9.0.5", {"app": "other"}, 9100)]
        for pod in pods:
            created = raw.create(RESOURCES["pods"], {k: v for k, v in pod.items() if k != "status"}, namespace)
            raw.update_status(RESOURCES["pods"], {**created, "status": pod["status"]}, namespace)
        (job,) = scrape_configs()
        job["kubernetes_sd_configs"][0]["namespaces"]["names"] = [namespace]
        job["kubernetes_sd_configs"][0]["kubeconfig_file"] = str(cluster.kubeconfig)
        config = write_yaml(tmp_path / "prometheus.yml", {"scrape_configs": [job]})
        out = promtool_ok(promtool, "check", "service-discovery", "--timeout=10s", config, "cdriver")
    finally:
        raw.delete(RESOURCES["nodes"], node)
    shown = {"__address__", "__metrics_path__"}
    targets = {tuple(sorted((k, v) for k, v in t["labels"].items() if k in shown or not k.startswith("__")))
               for t in yaml.safe_load(out) if t["labels"]}
    common = {"job": "cdriver", "namespace": namespace, "node": node, "__metrics_path__": "/metrics"}
    expected = [{"pod": "ctl", "component": "controller", "__address__": "10.9.0.1:8080", "instance": "10.9.0.1:8080"},
                {"pod": "plugin", "component": "kubelet-plugin", "__address__": "10.9.0.2:8081",
                 "instance": "10.9.0.2:8081"},
                {"pod": "daemon", "component": "imex-daemon", "compute_domain": "uid-a",
                 "__address__": "[fd00::3]:8082", "instance": "[fd00::3]:8082"}]
    assert targets == {tuple(sorted({**common, **e}.items())) for e in expected}
