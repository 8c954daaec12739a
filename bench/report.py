"""The table every benchmark prints after its JSON: one `metric  value` row each."""

from __future__ import annotations


def print_rows(rows: list[tuple[str, str]], json_out: str | None = None) -> None:
    """Print rows aligned on the metric name, then where the JSON was written."""
    width = max(len(name) for name, _ in rows)
    print(f"{'metric'.ljust(width)}  value")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    if json_out:
        print(f"JSON: {json_out}")
