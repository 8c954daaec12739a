"""Kubelet's side of a plugin's resource health stream, for tests: reports by device as they come."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from cdriver.dra.resource_health import DeviceHealthReport, watch_resource_health


class HealthStream:
    """`v1.DRAResourceHealth` of the plugin at `dra_socket`, read on a thread (a context manager)."""

    def __init__(self, dra_socket: Path, log_tail: Callable[[], str] = lambda: "") -> None:
        self.log_tail = log_tail
        self._reports: queue.Queue[dict[str, DeviceHealthReport]] = queue.Queue()
        self._channel = grpc.insecure_channel(f"unix://{dra_socket}")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for report in watch_resource_health(self._channel, "v1.DRAResourceHealth"):
                self._reports.put({d.device: d for d in report})
        except grpc.RpcError:
            pass

    def next_where(self, pred: Callable[[dict[str, DeviceHealthReport]], bool], what: str,
                   timeout: float = 20.0) -> dict[str, DeviceHealthReport]:
        """The next report (by device name) for which `pred` holds; fails the test at the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                got = self._reports.get(timeout=0.5)
            except queue.Empty:
                continue
            if pred(got):
                return got
        pytest.fail(f"no health report where {what}\n{self.log_tail()}")

    def __enter__(self) -> HealthStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._channel.close()
