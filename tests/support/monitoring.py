"""A real Prometheus beside a test world: the chart's scrape configuration and alert rules (rendered
with the test's values, as `helm template` gives them to a user), and waits on its alerts API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import yaml

from cdriver.checkout import CHART_DIR
from cdriver.sim.controlplane.binaries import prometheus_binaries
from cdriver.sim.monitoring.prometheus import Intervals, LocalPrometheus, load_scrape_configs, prometheus_config
from cdriver.sim.world.world import DRIVER_CDRIVER, DRIVER_NAMESPACE, RELEASE, SimWorld
from tests.support.waiting import wait_for

SCRAPE_CONFIG = CHART_DIR / "monitoring" / "scrape-config.yaml"
DASHBOARD = CHART_DIR / "monitoring" / "dashboard.json"
RULE_TEMPLATE = "templates/monitoring-prometheusrule.yaml"
#: scrape and evaluate every 2 s, so an alert's `for:` of seconds is what a test waits for
FAST = Intervals(scrape="2s", evaluation="2s")


def rendered_rules(world: SimWorld, values: list[str], dest: Path) -> Path:
    """The chart's PrometheusRule at this world's values plus `values`, as a plain rules file."""
    out = world.helm_cmd("template", RELEASE, *world.chart_args(DRIVER_CDRIVER), "--namespace", DRIVER_NAMESPACE,
                         "--set", "monitoring.prometheusRule.enabled=true", *values, "--show-only", RULE_TEMPLATE)
    assert out.returncode == 0, out.stderr
    dest.write_text(yaml.safe_dump(yaml.safe_load(out.stdout)["spec"], sort_keys=False))
    return dest


def start_prometheus(world: SimWorld, run_dir: Path, rule_values: list[str]) -> Iterator[LocalPrometheus]:
    """Prometheus scraping `world` through the chart's shipped scrape configuration; yields it."""
    rules = rendered_rules(world, rule_values, run_dir / "rules.yaml")
    config = prometheus_config(load_scrape_configs(SCRAPE_CONFIG), world.kubeconfig, [rules], FAST)
    prom = LocalPrometheus(prometheus_binaries(echo=False).prometheus, run_dir, config)
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


def matching(alert: dict, labels: dict[str, str]) -> bool:
    return all(alert["labels"].get(k) == v for k, v in labels.items())


def wait_firing(prom: LocalPrometheus, alertname: str, labels: dict[str, str], timeout: float) -> dict:
    """Wait until `alertname` fires with `labels`; the alert (labels, annotations, state)."""
    def probe() -> dict | None:
        return next((a for a in prom.firing(alertname) if matching(a, labels)), None)

    return wait_for(lambda: f"alert {alertname} {labels} to fire; alerts now: {json.dumps(prom.alerts())[:3000]}",
                    probe, timeout, interval=1.0)


def wait_cleared(prom: LocalPrometheus, alertname: str, labels: dict[str, str], timeout: float) -> None:
    """Wait until no alert `alertname` with `labels` is pending or firing."""
    def probe() -> bool:
        return not any(a["labels"].get("alertname") == alertname and matching(a, labels) for a in prom.alerts())

    wait_for(lambda: f"alert {alertname} {labels} to clear; alerts now: {json.dumps(prom.alerts())[:3000]}",
             probe, timeout, interval=1.0)


def dashboard_expressions() -> list[str]:
    """Every query expression of the shipped Grafana dashboard."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(DASHBOARD.read_text()))
    return found
