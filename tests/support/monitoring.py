"""The chart's monitoring files and promtool: where they are, and promtool run on them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from cdriver.checkout import CHART_DIR

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
