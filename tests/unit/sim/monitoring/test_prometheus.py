"""The local Prometheus's configuration: the shipped jobs, discovery through a kubeconfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.sim.monitoring.prometheus import Intervals, PrometheusError, load_scrape_configs, prometheus_config

JOB = {"job_name": "cdriver", "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": ["ns"]}}],
       "relabel_configs": [{"action": "keep", "source_labels": ["x"], "regex": "true"}]}


def test_every_discovery_entry_goes_through_the_kubeconfig_and_the_jobs_are_otherwise_as_shipped() -> None:
    config = prometheus_config([JOB], Path("/k/config"), [Path("/r/a.yaml")], Intervals("2s", "3s"))
    job = config["scrape_configs"][0]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["ns"]},
                                             "kubeconfig_file": "/k/config"}]
    assert job["relabel_configs"] == JOB["relabel_configs"]
    assert config["rule_files"] == ["/r/a.yaml"]
    assert config["global"] == {"scrape_interval": "2s", "evaluation_interval": "3s", "scrape_timeout": "2s"}
    assert "kubeconfig_file" not in JOB["kubernetes_sd_configs"][0], "the shipped jobs are not changed"


@pytest.mark.parametrize("jobs", [{"job_name": "x"}, [{"static_configs": []}], ["cdriver"]])
def test_a_scrape_configuration_that_is_not_a_list_of_named_jobs_is_refused(jobs: object) -> None:
    with pytest.raises(PrometheusError, match="list of jobs"):
        prometheus_config(jobs, Path("k"), [])  # type: ignore[arg-type]


def test_a_scrape_file_may_hold_the_list_or_a_scrape_configs_mapping(tmp_path: Path) -> None:
    listed, mapped, other = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    listed.write_text("- job_name: a\n")
    mapped.write_text("scrape_configs:\n- job_name: b\n")
    other.write_text("global: {}\n")
    assert load_scrape_configs(listed) == [{"job_name": "a"}]
    assert load_scrape_configs(mapped) == [{"job_name": "b"}]
    with pytest.raises(PrometheusError, match="expected a list"):
        load_scrape_configs(other)
