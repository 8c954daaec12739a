"""WorkQueue: per-key dedup, exclusive processing, retry with backoff, delayed adds."""

from __future__ import annotations

import logging
import threading
from collections import Counter

from cdriver.kube.errors import ApiError
from cdriver.kube.workqueue import RequeueAfter, WorkQueue


def run_queue(handler, **kwargs) -> WorkQueue:
    return WorkQueue(handler, base_delay=0.001, max_delay=0.01, **kwargs)


def test_keys_added_before_start_are_deduplicated() -> None:
    calls: Counter[str] = Counter()
    queue = run_queue(lambda key: calls.update([key]), workers=3)
    for _ in range(5):
        queue.add("a")
        queue.add("b")
    assert len(queue) == 2
    queue.start()
    assert queue.wait_idle(10)
    queue.stop()
    assert calls == {"a": 1, "b": 1}


def test_readd_while_processing_runs_again_and_never_concurrently() -> None:
    started = threading.Event()
    release = threading.Event()
    lock = threading.Lock()
    active: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    calls: Counter[str] = Counter()

    def handler(key: str) -> None:
        with lock:
            active[key] += 1
            peak[key] = max(peak[key], active[key])
            calls[key] += 1
            first = calls[key] == 1
        if first:
            started.set()
            release.wait(10)
        with lock:
            active[key] -= 1

    queue = run_queue(handler, workers=4)
    queue.start()
    queue.add("k")
    assert started.wait(10)
    # Added while a worker holds "k": must not start on another worker now.
    queue.add("k")
    queue.add("k")
    assert queue.pending() == 1  # only the running one; the re-add waits for it
    release.set()
    assert queue.wait_idle(10)
    queue.stop()
    assert calls["k"] == 2
    assert peak["k"] == 1


def test_failures_are_retried_then_forgotten_on_success() -> None:
    attempts: Counter[str] = Counter()
    requeues_seen: list[int] = []
    queue: WorkQueue

    def handler(key: str) -> None:
        attempts[key] += 1
        requeues_seen.append(queue.num_requeues(key))
        if attempts[key] < 3:
            raise RuntimeError("transient")

    queue = run_queue(handler)
    queue.start()
    queue.add("x")
    assert queue.wait_idle(10)
    queue.stop()
    assert attempts["x"] == 3
    assert requeues_seen == [0, 1, 2]
    assert queue.num_requeues("x") == 0


def test_a_conflict_is_retried_and_logged_without_a_traceback(caplog) -> None:
    """A 409 (another client wrote the object since it was read) is ordinary: one info line, no
    traceback even at debug verbosity; any other failure is a warning with its traceback."""
    attempts: Counter[str] = Counter()

    def handler(key: str) -> None:
        attempts[key] += 1
        if attempts[key] == 1:
            raise ApiError(409, "Conflict", "the object has been modified")
        if attempts[key] == 2:
            raise RuntimeError("broken")

    caplog.set_level(logging.DEBUG, logger="cdriver.kube.workqueue")
    queue = run_queue(handler)
    queue.start()
    queue.add("x")
    assert queue.wait_idle(10)
    queue.stop()
    assert attempts["x"] == 3
    conflict, other = [r for r in caplog.records if "x" in r.getMessage()][:2]
    assert (conflict.levelno, conflict.exc_info) == (logging.INFO, None)
    assert "changed while it was being written" in conflict.getMessage()
    assert other.levelno == logging.WARNING and other.exc_info is not None


def test_backoff_is_exponential_capped_and_jittered() -> None:
    queue = WorkQueue(lambda key: None, base_delay=0.1, max_delay=1.0, jitter=0.0)
    assert [queue.backoff_for(n) for n in (1, 2, 3, 4, 5, 10)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    jittered = WorkQueue(lambda key: None, base_delay=0.1, max_delay=10.0, jitter=0.2)
    samples = {jittered.backoff_for(3) for _ in range(50)}
    assert all(0.32 - 1e-9 <= s <= 0.48 + 1e-9 for s in samples)
    assert len(samples) > 1


def test_add_after_is_not_run_early_and_runs_when_due() -> None:
    calls: list[str] = []
    handled = threading.Event()

    def handle(key: str) -> None:
        calls.append(key)
        handled.set()

    queue = run_queue(handle)
    queue.start()
    queue.add_after("later", 3600)
    queue.add("now")
    assert handled.wait(10)  # "now" runs (a loaded machine may take a while)
    assert not queue.wait_idle(0.3)  # the delayed key keeps the queue busy
    assert calls == ["now"]
    queue.stop()
    queue2 = run_queue(calls.append)
    queue2.start()
    # the same key twice before it is due runs once (the delay leaves room for a slow second add)
    queue2.add_after("soon", 0.5)
    queue2.add_after("soon", 0.5)
    assert queue2.wait_idle(10)
    queue2.stop()
    assert calls == ["now", "soon"]


def test_requeue_after_is_not_a_failure() -> None:
    attempts: Counter[str] = Counter()

    def handler(key: str) -> None:
        attempts[key] += 1
        if attempts[key] == 1:
            raise RequeueAfter(0.01, "waiting for peers")

    queue = run_queue(handler)
    queue.start()
    queue.add("cd")
    assert queue.wait_idle(10)
    queue.stop()
    assert attempts["cd"] == 2
    assert queue.num_requeues("cd") == 0


def test_stop_ends_workers_and_ignores_new_keys() -> None:
    calls: list[str] = []
    queue = run_queue(calls.append, workers=2)
    queue.start()
    queue.stop()
    assert all(not t.is_alive() for t in queue._threads)
    queue.add("late")
    assert len(queue) == 0
    assert calls == []
