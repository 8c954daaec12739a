"""Figures of the reliability suite: what each test tried, what survived, what was lost.

Every reliability test records one or more figures; the suite's conftest prints them as a
table and as one JSON line at the end of the run (``make reliability`` shows both) and, on a
full run or where ``CDRIVER_RELIABILITY_JSON`` names a file, writes the JSON document
(figures, commit, sizes, timings) that ``python -m tests.reliability.figures FILE`` turns back
into the table the README shows.

``CDRIVER_RELIABILITY=full`` selects the full run's sizes; the default is the bounded subset
that runs with every ``make test``. ``CDRIVER_RELIABILITY_TIMINGS=kubelet`` runs the simulated
nodes with kubelet's own timings instead of the fast ones (heartbeats, crash-loop backoff,
retries; see `cdriver.sim.node.simulated.runtime.NodeOptions`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FULL = os.environ.get("CDRIVER_RELIABILITY", "") == "full"
TIMINGS_FAST, TIMINGS_KUBELET = "fast", "kubelet"
TIMINGS = os.environ.get("CDRIVER_RELIABILITY_TIMINGS", "") or TIMINGS_FAST
#: Where a full run writes its JSON document (the README's table is made from it).
RESULTS = Path(__file__).parent / "results" / "reliability.json"
#: Every figure recorded in this test session, in order.
RECORDED: list[Figure] = []


def check_timings() -> None:
    """Refuse a CDRIVER_RELIABILITY_TIMINGS this suite does not know."""
    if TIMINGS not in (TIMINGS_FAST, TIMINGS_KUBELET):
        raise ValueError(f"CDRIVER_RELIABILITY_TIMINGS={TIMINGS!r}: use {TIMINGS_FAST!r} (the default, short "
                         f"node timings) or {TIMINGS_KUBELET!r} (kubelet's own)")


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


def document(figures: list[Figure], **run: Any) -> dict[str, Any]:
    """The run's JSON document: its figures, size and timings, and what `run` adds (commit, outcome)."""
    rows = [{**asdict(f), "lost": f.lost} for f in figures]
    return {"reliability": rows, "full": FULL, "timings": TIMINGS, **run}


def json_line(figures: list[Figure], **run: Any) -> str:
    return json.dumps(document(figures, **run))


def json_path() -> Path | None:
    """Where this run writes its JSON document: CDRIVER_RELIABILITY_JSON, or RESULTS on a full run."""
    named = os.environ.get("CDRIVER_RELIABILITY_JSON", "")
    return Path(named) if named else (RESULTS if FULL else None)


def commit() -> str:
    """The checkout's commit, with ``+changes`` when tracked files differ from it ('' outside git)."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, check=False)

    head = git("rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:
        return ""
    dirty = git("diff", "--quiet", "HEAD", "--").returncode != 0
    return head.stdout.strip() + ("+changes" if dirty else "")


def from_document(doc: dict[str, Any]) -> list[Figure]:
    """The figures of a JSON document `document` wrote."""
    return [Figure(r["test"], r["what"], r["tried"], r["survived"], dict(r.get("extra") or {}))
            for r in doc.get("reliability") or []]


def main(argv: list[str] | None = None) -> int:
    """Print the table of a run's JSON document (what the README shows)."""
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.figures", description=main.__doc__)
    parser.add_argument("file", nargs="?", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    doc = json.loads(args.file.read_text())
    print(f"commit {doc.get('commit') or 'unknown'}, {'full run' if doc.get('full') else 'bounded subset'}, "
          f"{doc.get('timings', TIMINGS_FAST)} node timings, {doc.get('outcome', '')}".rstrip(", "))
    print(table(from_document(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
