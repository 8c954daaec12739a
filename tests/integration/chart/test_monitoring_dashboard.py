"""The Grafana dashboard: every panel query parses (promtool, as recording rules) and names only
series the roles expose."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.monitoring import DASHBOARD_FILE, known_series, panel_queries, promtool_ok, series_named, write_yaml


@pytest.fixture(scope="module")
def promtool() -> Path:
    from cdriver.sim.controlplane.binaries import prometheus_binaries

    return prometheus_binaries(echo=False).promtool


def test_every_panel_query_parses(promtool: Path, tmp_path: Path) -> None:
    queries = panel_queries()
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(queries.values())]
    rules_file = write_yaml(tmp_path / "dashboard-rules.yaml", {"groups": [{"name": "dashboard", "rules": rules}]})
    out = promtool_ok(promtool, "check", "rules", rules_file)
    assert f"SUCCESS: {len(rules)} rules found" in out


def test_panels_name_only_series_the_roles_expose() -> None:
    queries = panel_queries()
    assert len(queries) >= 20
    for where, expr in queries.items():
        unknown = sorted(name for name in series_named(expr) if not known_series(name))
        assert not unknown, f"{where} names {unknown}, which no role exposes"


def test_panels_follow_the_bootstrap_loop() -> None:
    rows = [p["title"] for p in json.loads(DASHBOARD_FILE.read_text())["panels"] if p["type"] == "row"]
    assert rows == ["ComputeDomains", "Clique daemons", "Prepare", "API client", "Processes"]
    exprs = " ".join(panel_queries().values())
    for needed in ("nvidia_dra_compute_domain_info", "cdriver_controller_clique_daemons", "cdriver_imex_daemon_ready",
                   "cdriver_imex_daemon_index", "histogram_quantile", "cdriver_kubelet_plugin_claims_waiting",
                   "cdriver_imex_daemon_imex_restarts_total", "cdriver_api_client_rate_limiter_wait_seconds_total"):
        assert re.search(rf"\b{needed}\b", exprs), needed
