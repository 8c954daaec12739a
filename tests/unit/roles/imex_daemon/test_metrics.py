"""The IMEX daemon's series: read from the daemon and its supervisor when scraped."""

from __future__ import annotations

from prometheus_client import generate_latest

from cdriver.roles.imex_daemon.clique import WRITE_CONFLICT, WRITE_OK
from cdriver.roles.imex_daemon.metrics import RESTART_CONFIG_CHANGED, DaemonMetrics, DaemonViews


def views(**over: object) -> DaemonViews:
    base: dict = dict(ready=lambda: False, running=lambda: False, starts=lambda: 0, crash_restarts=lambda: 0,
                      spawn_failures=lambda: 0, index=lambda: None, peers=lambda: 0)
    base.update(over)
    return DaemonViews(**base)


def value(metrics: DaemonMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_before_anything_happened_the_index_is_minus_one_and_nothing_runs() -> None:
    metrics = DaemonMetrics()
    metrics.bind(views())
    assert value(metrics, "cdriver_imex_daemon_index") == -1
    assert value(metrics, "cdriver_imex_daemon_ready") == 0
    assert value(metrics, "cdriver_imex_daemon_index_assignment_seconds") == 0
    assert value(metrics, "cdriver_imex_daemon_imex_restarts_total", reason="exited") == 0


def test_a_running_ready_daemon_with_restarts_failures_and_writes() -> None:
    metrics = DaemonMetrics()
    metrics.bind(views(ready=lambda: True, running=lambda: True, starts=lambda: 4, crash_restarts=lambda: 2,
                       spawn_failures=lambda: 1, index=lambda: 3, peers=lambda: 5))
    metrics.restarted(RESTART_CONFIG_CHANGED)
    metrics.exited_before_ready()
    metrics.start_held_back()
    metrics.index_assigned(1.5)
    metrics.index_assigned(9.0)  # the first assignment counts
    for result in (WRITE_CONFLICT, WRITE_OK):
        metrics.clique_write(result)
    expected = {
        ("cdriver_imex_daemon_ready", ()): 1, ("cdriver_imex_daemon_imex_running", ()): 1,
        ("cdriver_imex_daemon_imex_starts_total", ()): 4,
        ("cdriver_imex_daemon_imex_restarts_total", (("reason", "exited"),)): 2,
        ("cdriver_imex_daemon_imex_restarts_total", (("reason", "config_changed"),)): 1,
        ("cdriver_imex_daemon_imex_start_failures_total", ()): 3,
        ("cdriver_imex_daemon_index", ()): 3, ("cdriver_imex_daemon_index_assignment_seconds", ()): 1.5,
        ("cdriver_imex_daemon_peers", ()): 5,
        ("cdriver_imex_daemon_clique_updates_total", (("result", "conflict"),)): 1,
        ("cdriver_imex_daemon_clique_updates_total", (("result", "ok"),)): 1,
        ("cdriver_imex_daemon_clique_update_conflicts_total", ()): 1,
    }
    assert {key: value(metrics, key[0], **dict(key[1])) for key in expected} == expected
    assert b"cdriver_api_client_rate_limited_requests_total 0.0" in generate_latest(metrics.registry)
