"""Periodic tasks: a wake runs at once, the delay a run returns comes next."""

from __future__ import annotations


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
