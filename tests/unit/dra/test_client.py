"""Kubelet's side of the node service: a NodePrepareResources call that can be cancelled, as
kubelet cancels a pod's sync when the pod starts terminating."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cdriver.dra import node_service, sockets
from cdriver.dra.client import DRAError, DRAPluginClient, PluginEndpoint
from cdriver.dra.node_service import ClaimRef, PreparedDevice, PrepareResult

CLAIM = ClaimRef("ns", "c", "u1")


class HoldingDriver:
    """Answers NodePrepareResources only once released; records that it was asked."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()

    def prepare_claims(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        self.asked.set()
        self.release.wait(30)
        return {c.uid: PrepareResult(devices=[PreparedDevice([], "node-a", "channel-0", ["k/claim=x"])])
                for c in claims}

    def unprepare_claims(self, claims: list[ClaimRef]) -> dict[str, str]:
        return {c.uid: "" for c in claims}


@pytest.fixture
def served() -> Iterator[tuple[HoldingDriver, DRAPluginClient]]:
    d = Path("/tmp") / f"cdc-{uuid.uuid4().hex[:8]}"  # short: Unix socket names are limited
    d.mkdir()
    path = d / "dra.sock"
    driver = HoldingDriver()
    server = node_service.serve_node_service(path, driver)
    client = DRAPluginClient(PluginEndpoint("d.example.com", path, path, "v1.DRAPlugin", 0.0))
    yield driver, client
    driver.release.set()
    client.close()
    sockets.stop_server(server, path)
    d.rmdir()


def test_setting_cancel_cancels_a_prepare_in_flight(served: tuple[HoldingDriver, DRAPluginClient]) -> None:
    driver, client = served
    cancel = threading.Event()
    threading.Thread(target=lambda: driver.asked.wait(10) and cancel.set(), daemon=True).start()
    with pytest.raises(DRAError, match="CANCELLED") as info:
        client.prepare([CLAIM], timeout=30, cancel=cancel)
    assert info.value.code == grpc.StatusCode.CANCELLED
    # cancelled, not past its deadline (DEADLINE_EXCEEDED), while the driver had not answered
    assert driver.asked.is_set() and not driver.release.is_set()


def test_a_cancellable_prepare_answers_as_any(served: tuple[HoldingDriver, DRAPluginClient]) -> None:
    driver, client = served
    driver.release.set()
    result = client.prepare([CLAIM], timeout=10, cancel=threading.Event())
    assert result[CLAIM.uid].devices[0].device_name == "channel-0"
