"""Durations on the command line, as upstream's flags take them ("15s", "1m30s", "500ms")."""

from __future__ import annotations

import re

import click

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str) -> float:
    """Seconds from ``"15s"``, ``"1m30s"``, ``"500ms"`` or a plain number of seconds.

    Raises click.BadParameter naming `option` for anything else or a value that is not positive.
    """
    value = str(text).strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise click.BadParameter(f"{value!r} is not a duration (e.g. 15s, 1m30s, 500ms)",
                                     param_hint=option) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise click.BadParameter(f"{value!r} must be positive", param_hint=option)
    return seconds
