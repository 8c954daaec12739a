"""Figures of the reliability suite: what each test tried, what survived, what was lost.

Every reliability test records one or more figures; the suite's conftest prints them as a
table and as one JSON line at the end of the run (``make reliability`` shows both).
``CDRIVER_RELIABILITY=full`` selects the full run's sizes; the default is the bounded subset
that runs with every ``make test``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

FULL = os.environ.get("CDRIVER_RELIABILITY", "") == "full"
#: Every figure recorded in this test session, in order.
RECORDED: list[Figure] = []


def size(quick: int, full: int) -> int:
    """The bounded subset's size, or the full run's."""
    return full if FULL else quick


@dataclass
class Figure:
    """One line of the table: `tried` cases, of which `survived` converged and `lost` did not."""

    test: str
    what: str
    tried: int = 0
    survived: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return self.tried - self.survived

    def line(self) -> str:
        extra = "  ".join(f"{k}={v}" for k, v in self.extra.items())
        return f"{self.test:<26} {self.what:<34} {self.tried:>6} {self.survived:>8} {self.lost:>5}  {extra}"


def record(test: str, what: str, tried: int, survived: int, **extra: Any) -> Figure:
    """Record a figure and print it (pytest shows it with -s, and the table at the end)."""
    figure = Figure(test, what, tried, survived, dict(extra))
    RECORDED.append(figure)
    print(f"figure: {figure.line()}")
    return figure


def table(figures: list[Figure]) -> str:
    head = f"{'test':<26} {'what':<34} {'tried':>6} {'survived':>8} {'lost':>5}  figures"
    return "\n".join([head, "-" * len(head), *(f.line() for f in figures)])


def json_line(figures: list[Figure]) -> str:
    rows = [{**asdict(f), "lost": f.lost} for f in figures]
    return json.dumps({"reliability": rows, "full": FULL}, sort_keys=True)
