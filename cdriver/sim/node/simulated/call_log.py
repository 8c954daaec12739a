"""The node log's line per DRA node-service call: method, driver, the endpoint (plugin instance)
that served it, the claims and the outcome. Tests and benchmarks read them back (`read_calls`)
to count failed calls and which instance served what, e.g. across a rolling plugin update."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from cdriver.dra.client import DRAError

DRA_CALL = "DRA call:"
#: the outcome of a call when no instance of the driver was registered on the node
UNREGISTERED = "unregistered"
_LINE = re.compile(rf"{re.escape(DRA_CALL)} (\w+) driver=(\S+) endpoint=(\S+) claims=(\S*) outcome=(\w+)")


@dataclass(frozen=True)
class DraCall:
    """One NodePrepareResources or NodeUnprepareResources call as the node made it."""

    method: str
    driver: str
    endpoint: str  # the socket's file name ("-": none registered)
    claims: tuple[str, ...]  # claim UIDs
    outcome: str  # ok, error (some claim failed), timeout, cancelled, failed, unregistered

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def call_outcome(exc: DRAError) -> str:
    """How a DRA call failed as a whole: `timeout` at its deadline, `cancelled` when its pod went
    away first (or the plugin's registration went), else `failed`."""
    if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout"
    return "cancelled" if exc.code == grpc.StatusCode.CANCELLED else "failed"


def log_call(log: logging.Logger, method: str, driver: str, endpoint: Path | None, claims: Iterable[str],
             outcome: str) -> None:
    log.info("%s %s driver=%s endpoint=%s claims=%s outcome=%s", DRA_CALL, method, driver,
             endpoint.name if endpoint is not None else "-", ",".join(claims), outcome)


def read_calls(text: str) -> list[DraCall]:
    """The calls logged in a node log's text, in order."""
    return [DraCall(m.group(1), m.group(2), m.group(3), tuple(c for c in m.group(4).split(",") if c), m.group(5))
            for m in _LINE.finditer(text)]
