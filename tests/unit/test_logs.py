"""Role logging: what each verbosity adds (graded as upstream's), and verbosity 4 shows the
driver's debug lines, not a library's chatter."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator

import pytest

from cdriver.checkpoint import CheckpointStore
from cdriver.logs import (
    API_REQUESTS_LOGGER,
    GRADES,
    HTTP_ACCESS_LOGGER,
    WATCH_EVENTS_LOGGER,
    logger_levels,
    setup_logging,
)

GRADED = ("", WATCH_EVENTS_LOGGER, API_REQUESTS_LOGGER, HTTP_ACCESS_LOGGER)


@pytest.fixture
def role_logging() -> Iterator[Callable[[int], io.StringIO]]:
    """Role logging at a verbosity, written to a buffer; the loggers are restored afterwards."""
    root = logging.getLogger()
    saved_handlers = root.handlers[:]
    saved = {name: logging.getLogger(name or None).level for name in GRADED}

    def start(verbosity: int) -> io.StringIO:
        setup_logging("text", verbosity=verbosity)
        out = io.StringIO()
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(out)
        return out

    yield start
    root.handlers[:] = saved_handlers
    for name, level in saved.items():
        logging.getLogger(name or None).setLevel(level)


@pytest.fixture
def debug_output(role_logging) -> io.StringIO:
    """Role logging at verbosity 4, written to a buffer."""
    return role_logging(4)


def emit_one_of_each() -> None:
    logging.getLogger("cdriver.roles.controller.cli").info("start-up configuration of controller")
    logging.getLogger(WATCH_EVENTS_LOGGER).debug("informer pods: add ns/p")
    logging.getLogger("cdriver.roles.controller.reconciler").debug("reconciling ComputeDomain ns/cd")
    logging.getLogger(API_REQUESTS_LOGGER).debug("GET /api/v1/pods 200 in 3 ms")
    logging.getLogger(HTTP_ACCESS_LOGGER).debug("http: GET /metrics")


@pytest.mark.parametrize(("verbosity", "shown"), [
    (0, ["start-up"]), (1, ["start-up"]), (2, ["start-up", "informer"]), (3, ["start-up", "informer"]),
    (4, ["start-up", "informer", "reconciling"]), (5, ["start-up", "informer", "reconciling"]),
    (6, ["start-up", "informer", "reconciling", "GET /api"]),
    (7, ["start-up", "informer", "reconciling", "GET /api", "http:"]),
])
def test_each_verbosity_adds_its_grade(role_logging, verbosity: int, shown: list[str]) -> None:
    out = role_logging(verbosity)
    emit_one_of_each()
    lines = out.getvalue().splitlines()
    assert len(lines) == len(shown)
    for line, what in zip(lines, shown, strict=True):
        assert what in line


def test_the_grades_start_at_0_ascend_and_say_what_they_add() -> None:
    assert GRADES[0].verbosity == 0 and "start-up configuration" in GRADES[0].adds
    assert [g.verbosity for g in GRADES] == sorted({g.verbosity for g in GRADES})
    assert all(g.adds and g.levels for g in GRADES)
    assert logger_levels(0)[""] == logging.INFO and logger_levels(4)[""] == logging.DEBUG
    assert logger_levels(4)[API_REQUESTS_LOGGER] == logging.INFO
    assert logger_levels(6)[API_REQUESTS_LOGGER] == logging.DEBUG


def test_graded_loggers_are_the_modules_that_log_those_lines() -> None:
    from cdriver import httpserve
    from cdriver.kube import informer, raw

    assert informer.log.name == WATCH_EVENTS_LOGGER
    assert raw.requests_log.name == API_REQUESTS_LOGGER
    assert httpserve.log.name == HTTP_ACCESS_LOGGER


def test_checkpoint_lock_cycles_log_no_filelock_debug_lines_at_verbosity_4(debug_output, tmp_path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.json", boot_id="b")
    for _ in range(3):
        with store.locked():
            pass
    logging.getLogger("cdriver.roles.kubelet_plugin").debug("driver detail")
    text = debug_output.getvalue()
    assert "driver detail" in text
    assert "filelock" not in text
    assert "pu.lock" not in text
