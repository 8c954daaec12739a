"""`cdriver controller` against the real control plane: the IMEX daemon DaemonSets of live
domains follow the controller's feature gates, and the newest controller's gates win."""

from __future__ import annotations

from cdriver import featuregates
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.roles.controller import daemon_gates
from cdriver.roles.controller.daemon_gates import ANNOTATION_GATES_SET_AT, EVENT_FOLLOW_GATES
from cdriver.roles.controller.desired import DAEMON_CONTAINER_NAME
from cdriver.sim.world.scenario import compute_domain
from tests.integration.roles.controller import test_controller as base
from tests.integration.roles.controller.test_controller import CDS, DS, events_for, labelled, settings_for, wait_handled
from tests.support.waiting import wait_for

# the controller tests' fixtures
crds, driver_ns, start_controller = base.crds, base.driver_ns, base.start_controller

CLIQUES_ON = featuregates.FeatureGates()
CLIQUES_OFF = featuregates.FeatureGates({featuregates.COMPUTE_DOMAIN_CLIQUES: False})
FIRST, SECOND, THIRD = ("2026-01-01T10:00:00.000000Z", "2026-01-01T10:01:00.000000Z",
                        "2026-01-01T10:02:00.000000Z")


def daemon_env(ds: dict) -> str:
    return daemon_gates.gates_env(daemon_gates.daemon_container(ds, DAEMON_CONTAINER_NAME))


def test_a_controller_with_other_gates_updates_live_daemon_sets_and_an_older_one_never_sets_them_back(
        raw, namespace, driver_ns, start_controller):
    first = start_controller(settings_for(driver_ns, gates=CLIQUES_OFF, started_at=FIRST))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "cd1-channel", num_nodes=2), namespace)
    uid = cd["metadata"]["uid"]
    (ds,) = wait_for("the daemon DaemonSet", lambda: labelled(raw, DS, uid, driver_ns), 20)
    assert daemon_env(ds) == CLIQUES_OFF.to_env()
    assert ds["metadata"]["annotations"][ANNOTATION_GATES_SET_AT] == FIRST
    created = ds["metadata"]["generation"]  # spec writes only (the DaemonSet controller writes status)
    first.stop()

    # the chart's gates flipped: the new controller rewrites the pod template, all at once
    start_controller(settings_for(driver_ns, gates=CLIQUES_ON, started_at=SECOND))

    def updated() -> dict | None:
        (now,) = labelled(raw, DS, uid, driver_ns)
        return now if daemon_env(now) == CLIQUES_ON.to_env() else None

    ds = wait_for("the DaemonSet to carry the new controller's gates", updated, 20)
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "100%"  # every pod at once
    assert ds["metadata"]["annotations"][ANNOTATION_GATES_SET_AT] == SECOND
    assert ds["spec"]["template"]["spec"]["containers"][0]["name"] == DAEMON_CONTAINER_NAME
    (event,) = wait_for(  # Events are recorded apart from the write they tell of
        "the Event of the DaemonSet following the gates",
        lambda: [e for e in events_for(raw, raw.get(CDS, "cd1", namespace)) if e["reason"] == EVENT_FOLLOW_GATES],
        10)
    assert event["type"] == "Normal"
    assert "ComputeDomainCliques false -> true" in event["message"] and "restarts once" in event["message"]
    updated = ds["metadata"]["generation"]
    assert updated == created + 1

    # an older controller (started before the newer one set them) leaves them alone
    older = start_controller(settings_for(driver_ns, gates=CLIQUES_OFF, started_at=FIRST))
    wait_handled(older, raw, "cd1", namespace)
    (ds,) = labelled(raw, DS, uid, driver_ns)
    assert (ds["metadata"]["generation"], daemon_env(ds)) == (updated, CLIQUES_ON.to_env())
    older.stop()

    # a yet newer one with the gate off again sets it back, once
    newest = start_controller(settings_for(driver_ns, gates=CLIQUES_OFF, started_at=THIRD))
    ds = wait_for("the DaemonSet to carry the newest controller's gates",
                  lambda: (d := labelled(raw, DS, uid, driver_ns)[0]) and daemon_env(d) == CLIQUES_OFF.to_env() and d,
                  20)
    assert ds["metadata"]["annotations"][ANNOTATION_GATES_SET_AT] == THIRD
    env = [e["name"] for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert env.count(ENV_FEATURE_GATES) == 1
    wait_handled(newest, raw, "cd1", namespace)
    assert labelled(raw, DS, uid, driver_ns)[0]["metadata"]["generation"] == ds["metadata"]["generation"] == updated + 1
    messages = [e["message"] for e in events_for(raw, raw.get(CDS, "cd1", namespace))
                if e["reason"] == EVENT_FOLLOW_GATES]
    assert len(messages) == 2 and any("ComputeDomainCliques true -> false" in m for m in messages)
