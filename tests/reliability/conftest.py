"""The reliability suite's figures table, printed after the run."""

from __future__ import annotations

import pytest

from tests.reliability import figures


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not figures.RECORDED:
        return
    terminalreporter.section(f"reliability figures ({'full run' if figures.FULL else 'bounded subset'})")
    terminalreporter.write_line(figures.table(figures.RECORDED))
    terminalreporter.write_line(figures.json_line(figures.RECORDED))
