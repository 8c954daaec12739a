"""Checkpoint records of prepared claims, orphan CDI specs and stale domain directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.cdi.model import ContainerEdits, DeviceNode
from cdriver.cdi.writer import claim_spec_name, list_specs, write_spec
from cdriver.checkpoint import CheckpointStore, ClaimRecord, ClaimState
from cdriver.dra.node_service import PreparedDevice
from cdriver.roles.kubelet_plugin import cdi_edits
from cdriver.roles.kubelet_plugin.claims import AllocatedDevice, ClaimPlan
from cdriver.roles.kubelet_plugin.cleanup import stale_domain_dirs
from cdriver.roles.kubelet_plugin.config import PluginConfig
from cdriver.roles.kubelet_plugin.devices import DeviceRef
from cdriver.roles.kubelet_plugin.discovery import NodeDiscovery
from cdriver.roles.kubelet_plugin.metrics import PluginMetrics
from cdriver.roles.kubelet_plugin.prepare import record_devices, remove_orphan_specs
from cdriver.roles.kubelet_plugin.state import BackgroundEvents, PluginState, held_devices

pytestmark = pytest.mark.unit


def plan(uid: str, device: str = "channel-0") -> ClaimPlan:
    kind, _, num = device.rpartition("-")
    dev = AllocatedDevice("req", "node-a", device, DeviceRef(kind, int(num)))
    return ClaimPlan(uid=uid, namespace="ns", name="c", kind=kind, domain_id="cd", devices=(dev,))


def _state(tmp_path: Path, **settings: str) -> PluginState:
    cfg = PluginConfig(node_name="node-a", cdi_root=tmp_path / "cdi", plugins_dir=tmp_path / "plugins", **settings)
    return PluginState(config=cfg, discovery=NodeDiscovery(channel_major=240, clique_id=""), raw=None,
                       store=CheckpointStore(cfg.checkpoint_path, boot_id="boot-1"), cds=None, cliques=None,
                       node=None, metrics=PluginMetrics("node-a"), events=BackgroundEvents(None))


def test_recorded_devices_round_trip_and_count_only_completed_claims():
    p = plan("u1")
    devices = [PreparedDevice(["req"], "node-a", "channel-0", ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"])]
    stored = record_devices(devices, p)
    assert PreparedDevice.from_dict(stored[0]) == devices[0]
    claims = {
        "u1": ClaimRecord(uid="u1", state=ClaimState.PREPARE_COMPLETED, devices=stored, kind="channel"),
        "u2": ClaimRecord(uid="u2", state=ClaimState.PREPARE_STARTED, devices=stored, kind="channel"),
    }
    (held,) = held_devices(claims)
    assert (held.claim_uid, held.device, held.type, held.id, held.admin_access) == ("u1", "channel-0", "channel",
                                                                                    0, False)


def test_orphan_claim_specs_are_removed_and_owned_ones_kept(tmp_path: Path):
    state = _state(tmp_path)
    cfg, store = state.config, state.store
    edits = ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", type="c", major=1, minor=1)])
    for uid in ("owned", "orphan"):
        write_spec(cfg.cdi_root, claim_spec_name(uid), cdi_edits.claim_spec(uid, [("channel-0", edits)]))
    write_spec(cfg.cdi_root, cdi_edits.BASE_SPEC_NAME, cdi_edits.base_spec([]))
    with store.locked() as cp:
        cp.claims["owned"] = ClaimRecord(uid="owned", state=ClaimState.PREPARE_COMPLETED, kind="channel")
    assert remove_orphan_specs(state) == ["orphan"]
    assert list_specs(cfg.cdi_root) == sorted([claim_spec_name("owned"), cdi_edits.BASE_SPEC_NAME])


def test_stale_domain_dirs():
    assert stale_domain_dirs(["a", "b", "c"], known_domains={"a"}, used_domains={"b"}) == ["c"]


def test_unprepare_of_an_unfinished_prepare_leaves_an_aborted_entry(tmp_path: Path):
    from cdriver.dra.node_service import ClaimRef
    from cdriver.roles.kubelet_plugin.unprepare import Unpreparer

    state = _state(tmp_path, imex_mode="hostManaged")  # no node label to manage here
    with state.store.locked() as cp:
        cp.claims["u1"] = ClaimRecord(uid="u1", name="c", namespace="ns", state=ClaimState.PREPARE_STARTED,
                                      devices=[{"type": "channel", "id": 0}], kind="channel", updated=0)
        cp.claims["u2"] = ClaimRecord(uid="u2", state=ClaimState.PREPARE_COMPLETED, kind="channel")
    unpreparer = Unpreparer(state)
    assert unpreparer.unprepare(ClaimRef(namespace="ns", name="c", uid="u1")) is True
    assert unpreparer.unprepare(ClaimRef(namespace="ns", name="c2", uid="u2")) is True
    claims = state.store.read().claims
    assert list(claims) == ["u1"]
    assert claims["u1"].state is ClaimState.PREPARE_ABORTED and claims["u1"].devices == []
    assert claims["u1"].updated > 0
    # A second Unprepare of the aborted claim is a no-op.
    assert unpreparer.unprepare(ClaimRef(namespace="ns", name="c", uid="u1")) is False


def test_aborted_entries_expire_after_their_time_to_live():
    from cdriver.roles.kubelet_plugin.cleanup import ABORTED_ENTRY_TTL, expired_aborted

    claims = {
        "old": ClaimRecord(uid="old", state=ClaimState.PREPARE_ABORTED, updated=1000.0),
        "new": ClaimRecord(uid="new", state=ClaimState.PREPARE_ABORTED, updated=1000.0 + ABORTED_ENTRY_TTL),
        "started": ClaimRecord(uid="started", state=ClaimState.PREPARE_STARTED, updated=0.0),
    }
    assert expired_aborted(claims, 1000.0 + ABORTED_ENTRY_TTL, ABORTED_ENTRY_TTL) == ["old"]


def test_aborted_entries_of_deleted_domains_are_forgotten_at_once():
    from cdriver.roles.kubelet_plugin.cleanup import ABORTED_ENTRY_TTL, expired_aborted

    claims = {
        "gone": ClaimRecord(uid="gone", state=ClaimState.PREPARE_ABORTED, domain_id="deleted", updated=1000.0),
        "live": ClaimRecord(uid="live", state=ClaimState.PREPARE_ABORTED, domain_id="cd", updated=1000.0),
    }
    assert expired_aborted(claims, 1001.0, ABORTED_ENTRY_TTL, known_domains={"cd"}) == ["gone"]


def test_aborted_claims_do_not_keep_a_domain_directory():
    from cdriver.roles.kubelet_plugin.cleanup import domains_in_use

    claims = {
        "a": ClaimRecord(uid="a", state=ClaimState.PREPARE_ABORTED, domain_id="d1"),
        "s": ClaimRecord(uid="s", state=ClaimState.PREPARE_STARTED, domain_id="d2"),
        "c": ClaimRecord(uid="c", state=ClaimState.PREPARE_COMPLETED, domain_id="d3"),
    }
    assert domains_in_use(claims) == {"d2", "d3"}
    assert stale_domain_dirs(["d1", "d2", "d3"], set(), domains_in_use(claims)) == ["d1"]


def test_sweeps_follow_up_while_leftovers_of_deleted_domains_remain():
    from cdriver.roles.kubelet_plugin.cleanup import leftovers_of_deleted_domains

    started = {"s": ClaimRecord(uid="s", state=ClaimState.PREPARE_STARTED, domain_id="deleted")}
    completed = {"c": ClaimRecord(uid="c", state=ClaimState.PREPARE_COMPLETED, domain_id="deleted")}
    assert leftovers_of_deleted_domains(started, [], {"cd"})
    assert leftovers_of_deleted_domains({}, ["deleted"], {"cd"})
    assert not leftovers_of_deleted_domains(started, ["deleted"], {"deleted"})
    # A prepared claim of a deleted domain waits for kubelet's Unprepare, not for sweeps.
    assert not leftovers_of_deleted_domains(completed, [], {"cd"})


def test_periodic_task_runs_on_wake_and_after_the_delay_it_returns():
    import threading

    from cdriver.roles.kubelet_plugin.periodic import Periodic

    runs: list[int] = []
    ran = threading.Semaphore(0)  # counts every run: none is lost to a slow waiter

    def task() -> float | None:
        runs.append(1)
        ran.release()
        return 0.01 if len(runs) < 3 else None  # two quick follow-ups, then the (long) period

    periodic = Periodic("test", task, interval=3600, at_start=True)
    periodic.start()
    try:
        for _ in range(3):
            assert ran.acquire(timeout=10)
        assert not ran.acquire(timeout=0.3)  # back to the hour-long period
        periodic.wake()
        assert ran.acquire(timeout=10)
        assert len(runs) == 4
    finally:
        periodic.stop()


class RecordingLabeler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def set_label(self, key: str, value: str | None) -> None:
        self.calls.append((key, value))


def test_clique_id_is_re_read_and_its_label_re_applied(tmp_path: Path):
    from cdriver.nvml.discover import FabricError
    from cdriver.roles.kubelet_plugin.clique_refresh import CliqueRefresher

    state = _state(tmp_path)
    state.labeler = RecordingLabeler()
    answers: list[str | Exception] = ["", "uuid.5", FabricError("registration in progress")]

    def read() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    refresher = CliqueRefresher(state, read, own_label=True)
    assert refresher.refresh() == ""  # still no fabric: nothing to label
    assert state.labeler.calls == []
    assert refresher.refresh() == "uuid.5"  # the fabric registered after start
    assert state.discovery.clique_id == "uuid.5"
    assert refresher.refresh() == "uuid.5"  # a failed re-read keeps the known ID, label re-applied
    assert state.labeler.calls == [("nvidia.com/gpu.clique", "uuid.5")] * 2
