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
