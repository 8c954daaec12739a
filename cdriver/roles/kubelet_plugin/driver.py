"""The DRA node driver kubelet talks to: per-claim Prepare/Unprepare, metrics, error mapping.

Claims of one call are handled concurrently, and so are calls (the gRPC server has a thread
pool): a workload's channel claim waiting for readiness never blocks the daemon claim that
makes it ready. Only the checkpoint lock serialises state changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from cdriver.dra.node_service import ClaimRef, PrepareResult
from cdriver.roles.kubelet_plugin.errors import (
    KIND_UNKNOWN,
    REASON_INTERNAL,
    REASON_NONE,
    ClaimError,
    prepare_failed,
    prepare_failed_log,
)
from cdriver.roles.kubelet_plugin.metrics import (
    OP_PREPARE,
    OP_UNPREPARE,
    OUTCOME_OK,
    OUTCOME_PERMANENT,
    OUTCOME_RETRYABLE,
)
from cdriver.roles.kubelet_plugin.prepare import Preparer
from cdriver.roles.kubelet_plugin.state import PluginState
from cdriver.roles.kubelet_plugin.unprepare import Unpreparer

log = logging.getLogger(__name__)


class ComputeDomainDriver:
    """Implements `cdriver.dra.node_service.NodeDriver`."""

    def __init__(self, state: PluginState, max_parallel_claims: int = 32) -> None:
        self.state = state
        self.preparer = Preparer(state)
        self.unpreparer = Unpreparer(state)
        self._pool = ThreadPoolExecutor(max_workers=max_parallel_claims, thread_name_prefix="claim")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _map(self, fn: Callable[[ClaimRef], object], claims: list[ClaimRef]) -> list:
        if len(claims) == 1:
            return [fn(claims[0])]
        return list(self._pool.map(fn, claims))

    # -- prepare -------------------------------------------------------------------------
    def prepare_claims(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        deadline = time.monotonic() + self.state.config.prepare_timeout
        results = self._map(lambda ref: self._prepare_one(ref, deadline), claims)
        return {ref.uid: res for ref, res in zip(claims, results, strict=True)}

    def _prepare_one(self, ref: ClaimRef, deadline: float) -> PrepareResult:
        metrics = self.state.metrics
        start = time.monotonic()
        inflight = metrics.inflight.labels(metrics.driver, OP_PREPARE)
        inflight.inc()
        try:
            prepared = self.preparer.prepare(ref, deadline)
        except ClaimError as exc:
            metrics.observe_error(OP_PREPARE, "prepare_devices")
            self._observe_failure(OP_PREPARE, ref, exc, start)
            log.log(logging.WARNING if exc.permanent else logging.INFO, "%s", prepare_failed_log(str(ref), exc))
            return PrepareResult(error=prepare_failed(str(ref), str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug must not take the call down
            metrics.observe_error(OP_PREPARE, "internal")
            self._observe_failure(OP_PREPARE, ref, None, start)
            log.exception("%s", prepare_failed(str(ref), "unexpected error"))
            return PrepareResult(error=prepare_failed(str(ref), f"claim {ref}: internal error: {exc}"))
        finally:
            inflight.dec()
        seconds = time.monotonic() - start
        metrics.observe_success(OP_PREPARE, seconds)
        metrics.observe_claim(OP_PREPARE, prepared.kind, OUTCOME_OK, REASON_NONE, seconds)
        metrics.waiting.resolved(ref.uid)
        return PrepareResult(devices=prepared.devices)

    def _observe_failure(self, operation: str, ref: ClaimRef, exc: ClaimError | None, start: float) -> None:
        """Count a failed claim operation (``exc`` None: an unexpected error) and track a Prepare
        that kubelet retries as waiting."""
        metrics = self.state.metrics
        kind = exc.claim_kind if exc is not None else KIND_UNKNOWN
        reason = exc.reason if exc is not None else REASON_INTERNAL
        permanent = exc is None or exc.permanent
        metrics.observe_claim(operation, kind, OUTCOME_PERMANENT if permanent else OUTCOME_RETRYABLE, reason,
                              time.monotonic() - start)
        if operation != OP_PREPARE:
            return
        if permanent:
            metrics.waiting.resolved(ref.uid)
        else:
            metrics.waiting.failed(ref.uid, kind, reason)

    # -- unprepare -----------------------------------------------------------------------
    def unprepare_claims(self, claims: list[ClaimRef]) -> dict[str, str]:
        results = self._map(self._unprepare_one, claims)
        return {ref.uid: err for ref, err in zip(claims, results, strict=True)}

    def _unprepare_one(self, ref: ClaimRef) -> str:
        metrics = self.state.metrics
        start = time.monotonic()
        inflight = metrics.inflight.labels(metrics.driver, OP_UNPREPARE)
        inflight.inc()
        try:
            kind = self.unpreparer.unprepare_kind(ref)
        except ClaimError as exc:
            metrics.observe_error(OP_UNPREPARE, "unprepare_devices")
            self._observe_failure(OP_UNPREPARE, ref, exc, start)
            log.warning("unprepare %s failed: %s", ref, exc)
            return str(exc)
        except Exception as exc:  # noqa: BLE001
            metrics.observe_error(OP_UNPREPARE, "internal")
            self._observe_failure(OP_UNPREPARE, ref, None, start)
            log.exception("unprepare %s: unexpected error", ref)
            return f"claim {ref}: internal error: {exc}"
        finally:
            inflight.dec()
        seconds = time.monotonic() - start
        metrics.observe_success(OP_UNPREPARE, seconds)
        metrics.observe_claim(OP_UNPREPARE, kind or KIND_UNKNOWN, OUTCOME_OK, REASON_NONE, seconds)
        return ""
