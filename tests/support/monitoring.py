"""The chart's monitoring files and promtool: where they are, and promtool run on them; a real
Prometheus beside a test world (the chart's scrape configuration and alert rules, rendered with the
test's values as `helm template` gives them to a user) and waits on its alerts API."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import yaml

from cdriver.checkout import CHART_DIR
from cdriver.sim.monitoring.prometheus import Intervals, LocalPrometheus, load_scrape_configs, prometheus_config
from cdriver.sim.world.world import DRIVER_CDRIVER, DRIVER_NAMESPACE, RELEASE, SimWorld
from tests.support.waiting import wait_for

MONITORING_DIR = CHART_DIR / "monitoring"
RULES_FILE = MONITORING_DIR / "cdriver-alerts.yaml"
SCRAPE_CONFIG_FILE = MONITORING_DIR / "scrape-config.yaml"
DASHBOARD_FILE = MONITORING_DIR / "dashboard.json"
#: values that turn every monitoring object of the chart on
MONITORING_ON = ("--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.podMonitor.enabled=true",
                 "--set", "monitoring.dashboard.enabled=true")


def promtool_ok(promtool: Path, *args: str | Path) -> str:
    """Run `promtool ARGS`; fail the test with promtool's output unless it succeeds."""
    out = subprocess.run([str(promtool), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"promtool {' '.join(map(str, args))} failed:\n{out.stdout}{out.stderr}"
    return out.stdout


def write_yaml(path: Path, data: object) -> Path:
    """`data` as YAML at `path`."""
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def alerting_rules(groups: dict) -> dict[str, dict]:
    """The alerting rules of a rules file's content, by alert name."""
    return {rule["alert"]: rule for group in groups["groups"] for rule in group["rules"] if "alert" in rule}


#: the series cdriver's roles expose (the metric catalog; histograms by their _bucket, _sum and
#: _count series), which the rules and the dashboard may name besides `up` and process_*
CATALOG_METRICS = frozenset({
    "nvidia_dra_requests_total", "nvidia_dra_requests_inflight", "nvidia_dra_node_prepare_errors_total",
    "nvidia_dra_node_unprepare_errors_total", "nvidia_dra_prepared_devices", "nvidia_dra_compute_domain_info",
    *(f"nvidia_dra_request_duration_seconds{s}" for s in ("_bucket", "_sum", "_count")),
    "cdriver_api_client_requests_total", "cdriver_api_client_rate_limiter_wait_seconds_total",
    "cdriver_api_client_rate_limited_requests_total",
    "cdriver_controller_compute_domain_ready", "cdriver_controller_clique_daemons",
    "cdriver_controller_stale_node_labels",
    "cdriver_controller_node_labels_removed_total", "cdriver_controller_reconcile_total",
    *(f"cdriver_controller_reconcile_duration_seconds{s}" for s in ("_bucket", "_sum", "_count")),
    "cdriver_controller_api_writes_total", "cdriver_controller_leader", "cdriver_controller_queue_depth",
    "cdriver_kubelet_plugin_claim_operations_total",
    *(f"cdriver_kubelet_plugin_claim_operation_duration_seconds{s}" for s in ("_bucket", "_sum", "_count")),
    "cdriver_kubelet_plugin_readiness_waits", "cdriver_kubelet_plugin_claims_waiting",
    "cdriver_kubelet_plugin_oldest_waiting_claim_seconds", "cdriver_kubelet_plugin_node_label_changes_total",
    "cdriver_kubelet_plugin_domain_labels_missing", "cdriver_kubelet_plugin_checkpoint_rebuilds_total",
    "cdriver_kubelet_plugin_registered", "cdriver_kubelet_plugin_resourceslice_published",
    "cdriver_kubelet_plugin_resourceslice_publish_errors_total",
    "cdriver_imex_daemon_ready", "cdriver_imex_daemon_imex_running", "cdriver_imex_daemon_imex_starts_total",
    "cdriver_imex_daemon_imex_restarts_total", "cdriver_imex_daemon_imex_start_failures_total",
    "cdriver_imex_daemon_index", "cdriver_imex_daemon_index_assignment_seconds",
    "cdriver_imex_daemon_clique_update_conflicts_total", "cdriver_imex_daemon_clique_updates_total",
    "cdriver_imex_daemon_peers",
})
#: a series name right before its label matchers (every expression of the rules and the
#: dashboard writes its selectors with braces)
SELECTED_SERIES = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")


def series_named(expr: str) -> set[str]:
    """The series names an expression selects."""
    return set(SELECTED_SERIES.findall(expr))


def known_series(name: str) -> bool:
    """A series of the catalog, `up`, or a standard process_* one."""
    return name in CATALOG_METRICS or name == "up" or name.startswith("process_")


#: Grafana's variables in the dashboard's queries, and what stands in for them in plain PromQL
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$namespace": ".+"}


def panel_queries() -> dict[str, str]:
    """Each dashboard panel query as plain PromQL, by panel title and refId."""
    dashboard = json.loads(DASHBOARD_FILE.read_text())
    queries = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {target['expr']}"
            queries[f"{panel['title']} {target['refId']}"] = expr
    return queries


# --- a live Prometheus beside a world ----------------------------------------------------------

RULE_TEMPLATE = "templates/monitoring-prometheusrule.yaml"
#: scrape and evaluate every 2 s, so an alert's `for:` of seconds is what a test waits for
FAST = Intervals(scrape="2s", evaluation="2s")


def rendered_rules(world: SimWorld, values: list[str], dest: Path) -> Path:
    """The chart's PrometheusRule at this world's values plus `values`, as a plain rules file."""
    out = world.helm_cmd("template", RELEASE, *world.chart_args(DRIVER_CDRIVER), "--namespace", DRIVER_NAMESPACE,
                         "--set", "monitoring.prometheusRule.enabled=true", *values, "--show-only", RULE_TEMPLATE)
    assert out.returncode == 0, out.stderr
    return write_yaml(dest, yaml.safe_load(out.stdout)["spec"])


def start_prometheus(world: SimWorld, run_dir: Path, rule_values: list[str]) -> Iterator[LocalPrometheus]:
    """Prometheus scraping `world` through the chart's shipped scrape configuration; yields it."""
    from cdriver.sim.controlplane.binaries import prometheus_binaries

    rules = rendered_rules(world, rule_values, run_dir / "rules.yaml")
    config = prometheus_config(load_scrape_configs(SCRAPE_CONFIG_FILE), world.kubeconfig, [rules], FAST)
    prom = LocalPrometheus(prometheus_binaries(echo=False).prometheus, run_dir, config)
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


def target_summary(prom: LocalPrometheus) -> list[tuple[str, str, str, str, str]]:
    """Each active target as (component, node, compute_domain, health, last error), sorted."""
    return sorted((t["labels"].get("component", ""), t["labels"].get("node", ""),
                   t["labels"].get("compute_domain", ""), t["health"], t.get("lastError", ""))
                  for t in prom.targets())


def matching(alert: dict, labels: dict[str, str]) -> bool:
    return all(alert["labels"].get(k) == v for k, v in labels.items())


def wait_firing(prom: LocalPrometheus, alertname: str, labels: dict[str, str], timeout: float) -> dict:
    """Wait until `alertname` fires with `labels`; the alert (labels, annotations, state)."""
    def probe() -> dict | None:
        return next((a for a in prom.firing(alertname) if matching(a, labels)), None)

    return wait_for(lambda: f"alert {alertname} {labels} to fire; alerts now: {json.dumps(prom.alerts())[:3000]}; "
                            f"targets: {target_summary(prom)}",
                    probe, timeout, interval=1.0)


def wait_cleared(prom: LocalPrometheus, alertname: str, labels: dict[str, str], timeout: float) -> None:
    """Wait until no alert `alertname` with `labels` is pending or firing."""
    def probe() -> bool:
        return not any(a["labels"].get("alertname") == alertname and matching(a, labels) for a in prom.alerts())

    wait_for(lambda: f"alert {alertname} {labels} to clear; alerts now: {json.dumps(prom.alerts())[:3000]}",
             probe, timeout, interval=1.0)
