"""Kubelet's side of a DRA plugin in tests, built on `cdriver.dra.client` (what the simulated
kubelet calls): GetInfo on the registration socket, NodePrepareResources and
NodeUnprepareResources on the DRA socket, one connection per call as kubelet dials them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Protocol

from cdriver.api.constants import DRIVER_NAME
from cdriver.dra.client import DEFAULT_CALL_TIMEOUT, DRAPluginClient, PluginEndpoint, get_info
from cdriver.dra.node_service import ClaimRef, PrepareResult

#: the node-service version kubelet picks from the plugin's supported versions
SERVICE = "v1.DRAPlugin"


class PluginSockets(Protocol):
    """Where a plugin serves kubelet."""

    @property
    def reg_socket(self) -> Path: ...

    @property
    def dra_socket(self) -> Path: ...


def claim_ref(claim: dict) -> ClaimRef:
    """A ResourceClaim as kubelet names it to the plugin."""
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


class Kubelet:
    """What kubelet does with a DRA plugin, over the real sockets; a failed call raises
    `cdriver.dra.client.DRAError` (its `code`: the gRPC status)."""

    def __init__(self, plugin: PluginSockets) -> None:
        self.plugin = plugin

    def get_info(self, timeout: float = 5) -> Any:
        """GetInfo on the registration socket (the `InfoResponse`); raises `grpc.RpcError`."""
        return get_info(self.plugin.reg_socket, timeout)

    def _client(self) -> contextlib.closing[DRAPluginClient]:
        endpoint = PluginEndpoint(driver=DRIVER_NAME, endpoint=self.plugin.dra_socket,
                                  registration_socket=self.plugin.reg_socket, service=SERVICE,
                                  registered_at=time.monotonic())
        return contextlib.closing(DRAPluginClient(endpoint))

    def prepare(self, *claims: dict, timeout: float = DEFAULT_CALL_TIMEOUT) -> dict[str, PrepareResult]:
        """NodePrepareResources: UID -> devices or error."""
        with self._client() as client:
            return client.prepare([claim_ref(c) for c in claims], timeout=timeout)

    def unprepare(self, *claims: dict, timeout: float = DEFAULT_CALL_TIMEOUT) -> dict[str, str]:
        """NodeUnprepareResources: UID -> error ("" = done)."""
        with self._client() as client:
            return client.unprepare([claim_ref(c) for c in claims], timeout=timeout)
