"""The reliability suite: its kinds, its figures table (printed after the run) and its simulated cluster.

Every test collected under this folder carries the `reliability` marker, and a kind: `e2e` if it
runs on the suite's simulated cluster (the `rel_world` fixture), `unit` otherwise.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import figures
from tests.support.kinds import mark_kind

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Reliability, and e2e on the simulated cluster or unit without it."""
    on_cluster = "rel_world" in getattr(item, "fixturenames", ())
    mark_kind(item, HERE, pytest.mark.reliability, pytest.mark.e2e if on_cluster else pytest.mark.unit)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not figures.RECORDED:
        return
    stats = terminalreporter.stats
    outcome = ", ".join(f"{len(stats[k])} {k}" for k in ("passed", "failed", "error", "skipped") if stats.get(k))
    run = {"commit": figures.commit(), "outcome": outcome}
    terminalreporter.section(f"reliability figures ({'full run' if figures.FULL else 'bounded subset'}, "
                             f"{figures.TIMINGS} node timings, commit {run['commit'] or 'unknown'})")
    terminalreporter.write_line(figures.table(figures.RECORDED))
    terminalreporter.write_line(figures.json_line(figures.RECORDED, **run))
    path = figures.json_path()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures.document(figures.RECORDED, **run), indent=1) + "\n")
        terminalreporter.write_line(f"JSON: {path} (table: python -m tests.reliability.figures {path})")


@pytest.fixture(scope="package")
def rel_world() -> Iterator[Any]:
    """One simulated cluster (two cliques of two GB200 nodes) for the fault and load tests, with
    fast node timings unless CDRIVER_RELIABILITY_TIMINGS=kubelet."""
    from tests.reliability.cluster import Supervisor
    from tests.support.world import start_world

    try:
        figures.check_timings()
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    world = start_world({"nodes": 4, "fast": figures.TIMINGS == figures.TIMINGS_FAST}, "rel")
    supervisor = Supervisor(next(world)).start()
    try:
        yield supervisor.world
    finally:
        supervisor.stop()
        with contextlib.suppress(StopIteration):
            next(world)


@pytest.fixture
def rel_namespace(rel_world: Any, request: pytest.FixtureRequest) -> str:
    from cdriver.sim.world import scenario

    name = "rel-" + "".join(ch for ch in request.node.name.lower().replace("_", "-") if ch.isalnum() or ch == "-")
    name = name[:50].rstrip("-")
    scenario.ensure_namespace(rel_world.raw, name)
    return name
