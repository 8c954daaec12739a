"""Prepare of a channel claim whose ComputeDomain is being deleted: refused unless the
checkpoint says it completed before (the decision is the checkpoint's, not timing's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.checkpoint import CheckpointStore, ClaimState
from cdriver.dra.node_service import ClaimRef
from cdriver.roles.kubelet_plugin.config import PluginConfig
from cdriver.roles.kubelet_plugin.discovery import NodeDiscovery
from cdriver.roles.kubelet_plugin.errors import ClaimError
from cdriver.roles.kubelet_plugin.metrics import PluginMetrics
from cdriver.roles.kubelet_plugin.prepare import Preparer
from cdriver.roles.kubelet_plugin.state import BackgroundEvents, PluginState

NODE, CLIQUE, DOMAIN = "node-a", "cluster.1", "cd-uid"


class Objects:
    """Stands in for the informer caches and the API reads Prepare makes: one dict each."""

    def __init__(self, obj: dict | None) -> None:
        self.obj = obj

    def get(self, _uid: str) -> dict | None:
        return self.obj

    def lookup(self, _uid: str) -> tuple[bool, dict | None]:
        return True, self.obj

    def hint(self, _uid: str, _namespace: str) -> None:
        pass

    def get_by_name(self, _name: str, _namespace: str | None = None) -> dict | None:
        return self.obj


class Claims:
    def __init__(self) -> None:
        self.items: dict[str, dict] = {}

    def get(self, _res: object, name: str, _namespace: str) -> dict:
        return self.items[name]


def channel_claim(name: str) -> dict:
    params = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": DOMAIN}
    config = {"requests": ["channel"], "opaque": {"driver": constants.DRIVER_NAME, "parameters": params}}
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "channel"}], "config": [config]}},
            "status": {"allocation": {"devices": {
                "results": [{"request": "channel", "driver": constants.DRIVER_NAME, "pool": NODE,
                             "device": "channel-0"}],
                "config": [{"source": "FromClaim", **config}]}}}}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Preparer, Claims, Objects]:
    """A node labelled for the domain whose daemon is Ready in its clique: the fast path."""
    cfg = PluginConfig(node_name=NODE, cdi_root=tmp_path / "cdi", plugins_dir=tmp_path / "plugins",
                       driver_root=tmp_path / "root")
    cd = Objects({"metadata": {"name": "cd", "namespace": "team", "uid": DOMAIN}})
    clique = Objects({"daemons": [{"nodeName": NODE, "status": constants.STATUS_READY}]})
    node = Objects({"metadata": {"name": NODE, "labels": {constants.LABEL_COMPUTE_DOMAIN: DOMAIN}}})
    claims = Claims()
    state = PluginState(config=cfg, discovery=NodeDiscovery(channel_major=240, clique_id=CLIQUE),
                        raw=claims, store=CheckpointStore(cfg.checkpoint_path, boot_id="boot-1"),  # type: ignore[arg-type]
                        domains=cd, cliques=clique, node=node,  # type: ignore[arg-type]
                        metrics=PluginMetrics(NODE), events=BackgroundEvents(None))
    return Preparer(state), claims, cd


def prepare(preparer: Preparer, claims: Claims, name: str) -> list:
    claims.items.setdefault(name, channel_claim(name))
    return preparer.prepare(ClaimRef(namespace="team", name=name, uid=f"uid-{name}")).devices


def begin_deletion(cd: Objects) -> None:
    assert cd.obj is not None
    cd.obj["metadata"]["deletionTimestamp"] = "2026-12-02T12:00:00Z"


def test_a_claim_not_prepared_before_the_deletion_is_refused_every_time(world) -> None:
    preparer, claims, cd = world
    begin_deletion(cd)
    for _ in range(3):
        with pytest.raises(ClaimError) as err:
            prepare(preparer, claims, "late")
        assert not err.value.permanent
        assert (err.value.reason, err.value.claim_kind) == ("domain_deleting", "channel")
        assert "ComputeDomain team/cd (UID cd-uid) is being deleted; delete the pods" in str(err.value)
    # recorded like any failed Prepare, so its Unprepare finds it; it holds no channel
    rec = preparer.state.store.read().claims["uid-late"]
    assert rec.state == ClaimState.PREPARE_STARTED
    assert not list((preparer.config.cdi_root).glob("*uid-late*"))


def test_a_claim_completed_before_the_deletion_keeps_its_channel(world, tmp_path: Path) -> None:
    preparer, claims, cd = world
    before = prepare(preparer, claims, "early")
    assert [d.device_name for d in before] == ["channel-0"]
    begin_deletion(cd)
    again = prepare(preparer, claims, "early")
    assert [(d.device_name, d.cdi_device_ids) for d in again] == [(d.device_name, d.cdi_device_ids) for d in before]
    # a restarted plugin decides from the checkpoint on disk, not from what it remembers
    fresh = Preparer(preparer.state)
    fresh.state.store = CheckpointStore(preparer.config.checkpoint_path, boot_id="boot-1")
    assert [d.device_name for d in prepare(fresh, claims, "early")] == ["channel-0"]
