"""Restart backoff of the process supervisor (process behaviour: tests/integration)."""

from __future__ import annotations

import pytest

from cdriver.imex.supervisor import ProcessSupervisor, backoff_delay


def test_backoff_doubles_then_caps():
    delays = [backoff_delay(n, 0.5, 5.0) for n in range(0, 9)]
    assert delays == [0.0, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]


def test_backoff_survives_huge_failure_counts():
    assert backoff_delay(10_000, 1.0, 30.0) == 30.0


def test_supervisor_needs_argv():
    with pytest.raises(ValueError):
        ProcessSupervisor([])


def test_idle_supervisor_stop_is_a_no_op():
    sup = ProcessSupervisor(["nvidia-imex", "-c", "/imexd/imexd.cfg"])
    assert sup.stop() is None
    assert sup.pid is None
    assert sup.last_output_lines(5) == []
