"""Which daemon DaemonSets get the controller's feature gates, and what their new template is."""

from __future__ import annotations

import datetime as dt

import pytest

from cdriver import featuregates
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.roles.controller import daemon_gates, desired
from cdriver.roles.controller.daemon_gates import ANNOTATION_GATES_SET_AT, UPDATE_STRATEGY
from cdriver.roles.controller.desired import DAEMON_CONTAINER_NAME
from cdriver.roles.controller.trim import daemon_set_summary
from tests.unit.roles.controller.test_desired import domain, settings

CLIQUES = featuregates.COMPUTE_DOMAIN_CLIQUES
DNS = featuregates.IMEX_DAEMONS_WITH_DNS_NAMES
ON = featuregates.FeatureGates().to_env()
OFF = featuregates.FeatureGates({CLIQUES: False}).to_env()
IP_MODE = featuregates.FeatureGates({CLIQUES: False, DNS: False}).to_env()
EARLY = "2026-01-01T10:00:00.000000Z"
LATE = "2026-01-01T10:05:00.000000Z"


def daemon_set(gates_env: str, stamp: str = "") -> dict:
    """A DaemonSet as the controller renders it, created under `gates_env` (stamped `stamp`)."""
    return desired.daemon_set(domain(), settings(feature_gates_env=gates_env, started_at=stamp), "tmpl")


def env_of(ds: dict) -> dict[str, str]:
    container = daemon_gates.daemon_container(ds, DAEMON_CONTAINER_NAME)
    assert container is not None
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_gates_that_match_need_nothing():
    decision = daemon_gates.decide(daemon_set(ON, EARLY), DAEMON_CONTAINER_NAME, ON, LATE)
    assert decision.changes == {} and not decision.update


def test_other_gates_do_not_restart_daemons():
    """Only the gates that change what a daemon does with its domain count."""
    other = featuregates.FeatureGates({featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS: False}).to_env()
    assert not daemon_gates.decide(daemon_set(other), DAEMON_CONTAINER_NAME, ON, LATE).changes


@pytest.mark.parametrize(("old", "new", "changes"), [
    (OFF, ON, {CLIQUES: (False, True)}),
    (ON, OFF, {CLIQUES: (True, False)}),
    (IP_MODE, ON, {CLIQUES: (False, True), DNS: (False, True)}),
])
def test_a_flipped_gate_is_an_update(old, new, changes):
    decision = daemon_gates.decide(daemon_set(old, EARLY), DAEMON_CONTAINER_NAME, new, LATE)
    assert decision.changes == changes and decision.update


def test_a_daemon_set_without_stamp_follows_any_controller():
    """One created before stamps existed (or by the upstream controller) is updated."""
    assert daemon_gates.decide(daemon_set(OFF), DAEMON_CONTAINER_NAME, ON, EARLY).update


def test_an_older_controller_never_sets_back_what_a_newer_one_set():
    ds = daemon_set(ON, LATE)
    decision = daemon_gates.decide(ds, DAEMON_CONTAINER_NAME, OFF, EARLY)
    assert decision.changes == {CLIQUES: (True, False)}
    assert not decision.update and decision.newer_stamp == LATE
    # the newer one itself, and any later one, may
    assert daemon_gates.decide(ds, DAEMON_CONTAINER_NAME, OFF, LATE).update


def test_a_missing_feature_gates_variable_means_the_defaults():
    ds = daemon_set(ON)
    container = daemon_gates.daemon_container(ds, DAEMON_CONTAINER_NAME)
    container["env"] = [e for e in container["env"] if e["name"] != ENV_FEATURE_GATES]
    assert daemon_gates.gates_env(container) == ""
    assert not daemon_gates.decide(ds, DAEMON_CONTAINER_NAME, ON, LATE).changes
    assert daemon_gates.decide(ds, DAEMON_CONTAINER_NAME, OFF, LATE).changes == {CLIQUES: (True, False)}


def test_gate_names_of_another_version_are_skipped():
    """An upstream daemon's FEATURE_GATES may name gates cdriver does not know."""
    assert daemon_gates.gate_values("FutureGate=true,ComputeDomainCliques=false,") == {CLIQUES: False, DNS: True}


def test_the_new_template_carries_the_gates_the_strategy_and_the_stamp():
    old = daemon_set(OFF, EARLY)
    old["metadata"]["resourceVersion"] = "42"
    old["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    new = daemon_gates.with_gates(old, DAEMON_CONTAINER_NAME, ON, LATE)
    assert env_of(new)[ENV_FEATURE_GATES] == ON
    assert [e["name"] for e in daemon_gates.daemon_container(new, DAEMON_CONTAINER_NAME)["env"]].count(
        ENV_FEATURE_GATES) == 1
    assert new["spec"]["updateStrategy"] == UPDATE_STRATEGY
    assert new["metadata"]["annotations"][ANNOTATION_GATES_SET_AT] == LATE
    assert new["metadata"]["resourceVersion"] == "42"  # the update is guarded
    # everything else of the pod template is kept, and the input is untouched
    strip = {ENV_FEATURE_GATES}
    assert {k: v for k, v in env_of(new).items() if k not in strip} == \
        {k: v for k, v in env_of(old).items() if k not in strip}
    assert env_of(old)[ENV_FEATURE_GATES] == OFF
    assert not daemon_gates.decide(new, DAEMON_CONTAINER_NAME, ON, LATE).changes


def test_the_new_template_of_a_daemon_set_without_the_variable_adds_it():
    ds = daemon_set(ON)
    container = daemon_gates.daemon_container(ds, DAEMON_CONTAINER_NAME)
    container["env"] = [e for e in container["env"] if e["name"] != ENV_FEATURE_GATES]
    assert env_of(daemon_gates.with_gates(ds, DAEMON_CONTAINER_NAME, OFF, LATE))[ENV_FEATURE_GATES] == OFF


def test_a_daemon_set_without_its_daemon_container_is_refused():
    ds = daemon_set(ON)
    ds["spec"]["template"]["spec"]["containers"] = [{"name": "a"}, {"name": "b"}]
    assert daemon_gates.daemon_container(ds, DAEMON_CONTAINER_NAME) is None
    with pytest.raises(ValueError, match=DAEMON_CONTAINER_NAME):
        daemon_gates.with_gates(ds, DAEMON_CONTAINER_NAME, OFF, LATE)


def test_the_cached_summary_decides_as_the_full_object():
    for gates, stamp in ((OFF, EARLY), (ON, LATE), (ON, "")):
        full = daemon_set(gates, stamp)
        small = daemon_set_summary(full)
        assert "resourceClaims" not in str(small) and len(str(small)) < len(str(full)) / 3
        for want, own in ((ON, EARLY), (OFF, EARLY), (ON, LATE), (OFF, LATE)):
            assert daemon_gates.decide(small, DAEMON_CONTAINER_NAME, want, own) == \
                daemon_gates.decide(full, DAEMON_CONTAINER_NAME, want, own)


def test_stamps_order_as_start_times():
    first = daemon_gates.start_stamp(dt.datetime(2026, 1, 1, 10, 0, 0, 1, tzinfo=dt.UTC))
    second = daemon_gates.start_stamp(dt.datetime(2026, 1, 1, 10, 0, 0, 2, tzinfo=dt.UTC))
    assert first == "2026-01-01T10:00:00.000001Z"
    assert daemon_gates.decide(daemon_set(ON, second), DAEMON_CONTAINER_NAME, OFF, first).newer_stamp == second
    assert daemon_gates.decide(daemon_set(ON, first), DAEMON_CONTAINER_NAME, OFF, second).update


def test_describe_names_each_change():
    assert daemon_gates.describe({CLIQUES: (False, True), DNS: (True, False)}) == \
        "ComputeDomainCliques false -> true, IMEXDaemonsWithDNSNames true -> false"
