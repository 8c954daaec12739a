"""The metric names a PromQL expression reads (tests check each exists in a live scrape)."""

from __future__ import annotations

import re

#: words of PromQL that are not metric names
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                      "unless", "offset", "atan2", "inf", "nan", "start", "end"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_NUMBER_SUFFIX = re.compile(r"\b\d+(\.\d+)?[smhdwy]\b")


def metric_names(expr: str) -> set[str]:
    """Every bare metric name in `expr` (label names, functions, keywords and durations left out).

    A selector written only as `{__name__="x"}` is read as `x` too.
    """
    names = set(re.findall(r'__name__\s*=\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"', expr))
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _NUMBER_SUFFIX.sub(" ", text)
    for name, call in _IDENT.findall(text):
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names
