"""The chart's alert rules: the PrometheusRule and the plain rules file are one source, promtool
accepts both, and its unit tests show every alert firing on its failure and quiet when healthy."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.chart import by_kind, objects
from tests.support.monitoring import RULES_FILE, alerting_rules, promtool_ok, write_yaml

UNIT_TESTS = Path(__file__).parent / "data" / "cdriver-alerts.test.yaml"
RULE_ON = ("--set", "monitoring.prometheusRule.enabled=true")
SEVERITIES = {"warning", "critical"}
COMPONENTS = {"controller", "kubelet-plugin", "imex-daemon"}


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


@pytest.fixture(scope="module")
def promtool() -> Path:
    from cdriver.sim.controlplane.binaries import prometheus_binaries

    return prometheus_binaries(echo=False).promtool


def rendered_spec(helm: Path, *args: str) -> dict:
    (rule,) = by_kind(objects(helm, *RULE_ON, *args), "PrometheusRule").values()
    return rule["spec"]


def unit_test_cases() -> list[dict]:
    return [case for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for case in group["alert_rule_test"]]


def test_plain_rules_file_is_the_chart_defaults_rendered(helm: Path) -> None:
    assert yaml.safe_load(RULES_FILE.read_text()) == rendered_spec(helm), (
        f"{RULES_FILE} differs from the chart's rendered rules: run `make monitoring-rules`")


def test_promtool_accepts_the_plain_rules_file(promtool: Path) -> None:
    assert "SUCCESS: 15 rules found" in promtool_ok(promtool, "check", "rules", RULES_FILE)


def test_promtool_accepts_the_prometheusrule_with_values_set(helm: Path, promtool: Path, tmp_path: Path) -> None:
    spec = rendered_spec(helm, "--set", "monitoring.alerts.prepareWaiting.seconds=900",
                         "--set", "monitoring.alerts.prepareWaiting.for=3m",
                         "--set", "monitoring.alerts.pluginGone.window=30m",
                         "--set", "monitoring.alerts.apiClientRateLimited.enabled=false", "--set", "monitoring.job=gpu")
    promtool_ok(promtool, "check", "rules", write_yaml(tmp_path / "rules.yaml", spec))
    rules = alerting_rules(spec)
    waiting = rules["CdriverPrepareWaitingTooLong"]
    assert waiting["expr"].endswith("> 900") and waiting["for"] == "3m"
    assert "[30m]" in rules["CdriverKubeletPluginGone"]["expr"]
    assert "CdriverApiClientRateLimited" not in rules
    assert all('job="gpu"' in rule["expr"] and 'job="cdriver"' not in rule["expr"] for rule in rules.values())


def test_each_alert_carries_severity_component_and_points_at_a_boundary_and_a_command() -> None:
    for name, rule in alerting_rules(yaml.safe_load(RULES_FILE.read_text())).items():
        assert rule["labels"]["severity"] in SEVERITIES, name
        # the API client alerts take the component from their series (every role has a client)
        assert rule["labels"].get("component", "series") in COMPONENTS | {"series"}, name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook"}, name
        assert "Failure boundary" in notes["description"] or "API" in name, name
        assert "cdriver diagnose" in notes["runbook"], name


def test_promtool_unit_tests_fire_every_alert_and_none_when_healthy(promtool: Path, tmp_path: Path) -> None:
    # The annotations' label references are checked below; promtool compares expanded annotations,
    # so the rules it tests here leave them out and keep expressions, durations and labels as shipped.
    rules = yaml.safe_load(RULES_FILE.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    write_yaml(tmp_path / RULES_FILE.name, rules)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    assert "SUCCESS" in promtool_ok(promtool, "test", "rules", tmp_path / UNIT_TESTS.name)


def test_unit_tests_cover_every_alert_firing_and_quiet() -> None:
    alerts = set(alerting_rules(yaml.safe_load(RULES_FILE.read_text())))
    healthy = yaml.safe_load(UNIT_TESTS.read_text())["tests"][0]
    assert healthy["name"] == "a healthy cluster raises no alert"
    quiet = {case["alertname"] for case in healthy["alert_rule_test"] if not case["exp_alerts"]}
    firing = {case["alertname"] for case in unit_test_cases() if case["exp_alerts"]}
    assert quiet == alerts and firing == alerts


def test_annotations_name_only_labels_their_alert_carries() -> None:
    carried: dict[str, set[str]] = {}
    for case in unit_test_cases():
        for alert in case["exp_alerts"]:
            carried.setdefault(case["alertname"], set()).update(alert["exp_labels"])
    for name, rule in alerting_rules(yaml.safe_load(RULES_FILE.read_text())).items():
        named = set(re.findall(r"\$labels\.(\w+)", " ".join(rule["annotations"].values())))
        assert named <= carried[name], f"{name}'s annotations name {sorted(named - carried[name])}, which it lacks"
