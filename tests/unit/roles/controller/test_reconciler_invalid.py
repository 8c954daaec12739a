"""An invalid ComputeDomain (accepted by an older CRD) gets nothing generated, a NotReady status
and an Event that say why."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cdriver.api import constants
from cdriver.roles.controller.metrics import ControllerMetrics
from cdriver.roles.controller.reconciler import EVENT_INVALID, Caches, Reconciler, parse_domain
from cdriver.roles.controller.settings import ControllerSettings


class OneDomain:
    """The domains cache holding one object."""

    def __init__(self, obj: dict) -> None:
        self.obj = obj

    def get(self, key: str) -> dict | None:
        return self.obj if key == "team/cd1" else None


class RecordingApi:
    """Records every request; only status writes are expected."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def update_status(self, res: Any, body: dict) -> dict:
        self.calls.append(("update_status", body))
        return body

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args))
            raise AssertionError(f"unexpected API call {name}")
        return call


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def warning(self, obj: dict, reason: str, message: str) -> None:
        self.events.append((reason, message))


@pytest.mark.parametrize("name, fragment", [
    ("", "must not be empty"),
    ("Not_A_Valid_Name", "is not a valid Kubernetes object name"),
    ("x" * 300, "300 characters, more than the 253"),
])
def test_invalid_template_name_generates_nothing_and_sets_a_status(name: str, fragment: str) -> None:
    obj = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
           "metadata": {"name": "cd1", "namespace": "team", "uid": "u1", "resourceVersion": "3", "generation": 1},
           "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": name}}}}
    api, recorder = RecordingApi(), Recorder()
    reconciler = Reconciler(api, Caches(domains=OneDomain(obj), templates=None),  # type: ignore[arg-type]
                            ControllerSettings(), recorder, ControllerMetrics(),  # type: ignore[arg-type]
                            clock=lambda: "2030-01-01T00:00:00Z")
    reconciler.reconcile("team/cd1")
    assert [c[0] for c in api.calls] == ["update_status"]  # no DaemonSet, no template
    status = api.calls[0][1]["status"]
    (condition,) = status["conditions"]
    assert status["status"] == constants.STATUS_NOT_READY
    assert (condition["status"], condition["reason"]) == ("False", EVENT_INVALID)
    assert "spec.channel.resourceClaimTemplate.name" in condition["message"] and fragment in condition["message"]
    assert [r for r, _ in recorder.events] == [EVENT_INVALID]


class PruningApi(RecordingApi):
    """An API server with the upstream driver's CRD: status conditions and readyNodes are pruned."""

    def update_status(self, res: Any, body: dict) -> dict:
        stored = copy.deepcopy(body)
        for name in ("conditions", "readyNodes"):
            stored["status"].pop(name, None)
        self.calls.append(("update_status", stored))
        return stored


def test_status_keeps_being_written_once_the_crd_is_seen_to_prune_conditions() -> None:
    """After a switch from the upstream driver its CRD stays: the first write shows conditions
    are pruned; later status changes are still written (the domain does not fail to reconcile)."""
    obj = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
           "metadata": {"name": "cd1", "namespace": "team", "uid": "u1", "resourceVersion": "3", "generation": 1},
           "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "cd1-channel"}}}}
    api = PruningApi()
    reconciler = Reconciler(api, Caches(domains=OneDomain(obj), templates=None),  # type: ignore[arg-type]
                            ControllerSettings(), Recorder(), ControllerMetrics(),  # type: ignore[arg-type]
                            clock=lambda: "2030-01-01T00:00:00Z")
    cd = parse_domain(obj)
    reconciler._write_status(obj, cd, [], None)
    ready = {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0, "status": constants.STATUS_READY}
    reconciler._write_status({**obj, "status": api.calls[-1][1]["status"]}, cd, [ready], None)
    assert [c[0] for c in api.calls] == ["update_status", "update_status"]
    written = api.calls[-1][1]["status"]
    assert written["status"] == constants.STATUS_READY and written["nodes"] == [ready]
    assert "conditions" not in written and "readyNodes" not in written
