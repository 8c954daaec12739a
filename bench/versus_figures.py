"""The figures of bench/versus.py from its recorded runs: medians and spread, Prepare calls,
the merge of runs made in parts, and the markdown table.

A versus document (bench/results/versus.json) holds one entry per run of one driver in one
part and round (`runs`), each with its figures and the Prepare calls its nodes logged; every
figure of the table is computed from them, so documents made in several parts merge by
concatenating their runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

DRIVERS = ("cdriver", "upstream")

#: (key, label) in table order; `{domains}`, `{default_limits}` and `{high_limit}` are filled
#: from the document's settings
FIGURES: list[tuple[str, str]] = [
    ("time_to_channel_n2_s", "time to channel, N=2 (s)"),
    ("time_to_channel_n8_s", "time to channel, N=8 (s)"),
    ("prepare_p50_ms", "Prepare p50, all calls (ms)"),
    ("prepare_p99_ms", "Prepare p99, all calls (ms)"),
    ("prepare_ok_p50_ms", "Prepare p50, successful calls (ms)"),
    ("prepare_ok_p99_ms", "Prepare p99, successful calls (ms)"),
    ("prepare_calls_per_claim", "Prepare calls per claim"),
    ("prepare_not_ok", "Prepare calls failed or timed out (their ms)"),
    ("controller_default_s", "controller, {domains} CDs, default client limits {default_limits} (s)"),
    ("controller_high_s", "controller, {domains} CDs, both at client limit {high_limit} (s)"),
    ("api_writes_per_cd", "API writes per CD (all clients, high limit)"),
    ("status_written_pct", "CDs with a status by then (%, high limit)"),
    ("controller_cpu_s", "controller CPU for the CDs (s, high limit)"),
    ("controller_rss_mb", "controller RSS after the CDs (MB, high limit)"),
    ("controller_idle_cpu_s_per_min", "controller idle CPU (s/min)"),
    ("controller_idle_rss_mb", "controller idle RSS (MB)"),
    ("plugin_idle_cpu_s_per_min", "plugin idle CPU (s/min)"),
    ("plugin_idle_rss_mb", "plugin idle RSS (MB)"),
    ("plugin_load_cpu_s", "plugin CPU for the channel rounds (s)"),
    ("plugin_load_rss_mb", "plugin RSS after the channel rounds (MB)"),
    ("daemon_bootstrap_cpu_s", "daemon CPU to Ready, probes included (s)"),
    ("daemon_bootstrap_probe_cpu_s", "of which exec probes (s)"),
    ("daemon_load_rss_mb", "daemon RSS at Ready (MB)"),
    ("daemon_idle_cpu_s_per_min", "daemon idle CPU, probes included (s/min)"),
    ("daemon_idle_probe_cpu_s_per_min", "of which exec probes (s/min)"),
    ("daemon_idle_rss_mb", "daemon idle RSS (MB)"),
    ("launcher_rss_mb_per_pod", "node overhead: launchers per pod (MB, not in the RSS above)"),
]

#: figures shown side by side without a ratio (higher is not worse, or not a number)
NO_RATIO = {"status_written_pct", "prepare_not_ok"}
#: figures computed over the Prepare calls of all rounds together, not per round
PREPARE_KEYS = {"prepare_p50_ms", "prepare_p99_ms", "prepare_ok_p50_ms", "prepare_ok_p99_ms",
                "prepare_calls_per_claim", "prepare_not_ok"}


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q`th percentile (nan for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def spread(values: Iterable[float]) -> dict[str, float] | None:
    """Median, min, max and count of `values` (None for none)."""
    got = [float(v) for v in values]
    if not got:
        return None
    return {"median": statistics.median(got), "min": min(got), "max": max(got), "n": len(got)}


def runs_of(doc: dict[str, Any], driver: str) -> list[dict[str, Any]]:
    return [run for run in doc.get("runs", []) if run["driver"] == driver]


def prepare_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Prepare figures over the calls of `runs` together: every call, the successful ones, and
    the failed or timed-out ones with their durations."""
    calls = [c for run in runs for c in run.get("prepare_calls", [])]
    claims = sum(run.get("channel_claims", 0) for run in runs)
    if not calls:
        return {}
    every = [c["ms"] for c in calls]
    ok = [c["ms"] for c in calls if c.get("outcome", "ok" if not c["errors"] else "error") == "ok"]
    bad = [c for c in calls if c.get("outcome", "ok" if not c["errors"] else "error") != "ok"]
    not_ok = f"{len(bad)} of {len(calls)}"
    if bad:
        ordered = sorted(bad, key=lambda c: c["ms"])
        not_ok += ": " + ", ".join(f"{c.get('outcome', 'error')} {c['ms']:.0f}" for c in ordered)
    return {"prepare_p50_ms": round(percentile(every, 50), 1), "prepare_p99_ms": round(percentile(every, 99), 1),
            "prepare_ok_p50_ms": round(percentile(ok, 50), 1), "prepare_ok_p99_ms": round(percentile(ok, 99), 1),
            "prepare_calls_per_claim": round(len(calls) / claims, 2) if claims else float("nan"),
            "prepare_not_ok": not_ok}


def summary(doc: dict[str, Any], driver: str) -> dict[str, Any]:
    """Per figure: a spread over the driver's runs that have it, or a value over all its calls
    (the Prepare figures)."""
    runs = runs_of(doc, driver)
    out: dict[str, Any] = {}
    for key, _ in FIGURES:
        if key in PREPARE_KEYS:
            continue
        got = spread(run["figures"][key] for run in runs if key in run.get("figures", {}))
        if got is not None:
            out[key] = got
    out.update(prepare_figures(runs))
    return out


def median_of(cell: Any) -> float | None:
    if isinstance(cell, dict):
        return cell["median"]
    return cell if isinstance(cell, int | float) else None


def ratios(doc: dict[str, Any]) -> dict[str, float]:
    """cdriver / upstream of the medians (below 1: cdriver better)."""
    a, b = summary(doc, "cdriver"), summary(doc, "upstream")
    out = {}
    for key, _ in FIGURES:
        x, y = median_of(a.get(key)), median_of(b.get(key))
        if key not in NO_RATIO and x is not None and y:
            out[key] = round(x / y, 2)
    return out


def number(value: float) -> str:
    """A figure rounded to what the table shows: 3 significant digits, no trailing zeros."""
    if value != value:  # nan
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def cell(value: Any) -> str:
    """`median (min–max, n)` of a spread; a single run shows its value alone."""
    if value is None:
        return ""
    if isinstance(value, dict):
        if value["n"] == 1 or value["min"] == value["max"]:
            return number(value["median"]) + ("" if value["n"] == 1 else f" (×{value['n']})")
        return f"{number(value['median'])} ({number(value['min'])}–{number(value['max'])}, n={value['n']})"
    if isinstance(value, float):
        return number(value)
    return str(value)


def domains_of(doc: dict[str, Any], key: str) -> str:
    """How many ComputeDomains the runs that measured `key` created (each run records it)."""
    counts = sorted({run["domains"] for run in doc.get("runs", []) if key in run.get("figures", {})
                     and "domains" in run})
    if not counts:
        return str(doc.get("settings", {}).get("domains", "?"))
    return "/".join(str(n) for n in counts)


def labels(doc: dict[str, Any]) -> dict[str, str]:
    settings = doc.get("settings", {})
    limits = settings.get("default_limits", {})
    default = ", ".join(f"{d} {'/'.join(str(x) for x in limits[d])}" for d in DRIVERS if d in limits)
    high = "/".join(str(x) for x in settings.get("high_limit", ()))
    fill = {"default_limits": f"(qps/burst: {default})" if default else "",
            "high_limit": f"{high} (qps/burst)" if high else "(high)"}
    return {key: label.format(domains=domains_of(doc, key), **fill).replace("  ", " ") for key, label in FIGURES}


def table(doc: dict[str, Any]) -> str:
    """The markdown table: per driver the median over its rounds (min–max, rounds), and the
    ratio of the medians."""
    sums = {d: summary(doc, d) for d in DRIVERS}
    ratio = ratios(doc)
    names = labels(doc)
    lines = ["| figure | cdriver | upstream | ratio |", "|---|---:|---:|---:|"]
    for key, _ in FIGURES:
        cells = [cell(sums[d].get(key)) for d in DRIVERS]
        if not any(cells):
            continue
        lines.append(f"| {names[key]} | {cells[0]} | {cells[1]} | {number(ratio[key]) if key in ratio else ''} |")
    return "\n".join(lines)


def caption(doc: dict[str, Any]) -> str:
    """What the table was measured at: commit, rounds per part, load."""
    parts: dict[str, set[int]] = {}
    for run in doc.get("runs", []):
        parts.setdefault(run["part"], set()).add(run["round"])
    loads = [x for run in doc.get("runs", []) for x in run.get("load", [])]
    commits = sorted({run.get("commit", "?") for run in doc.get("runs", [])})
    rounds = ", ".join(f"{part} {len(r)}" for part, r in sorted(parts.items()))
    load = f"load average {min(loads):.1f}–{max(loads):.1f}" if loads else "load not recorded"
    return (f"Measured at commit {', '.join(commits)}; rounds per part (drivers interleaved): {rounds}; "
            f"{load}; median (min–max, n) over the rounds.")


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document of the runs of `docs` (parts or chunks of rounds run apart); the settings
    of the last one win, the rounds renumbered per part so that none repeats."""
    out: dict[str, Any] = {"settings": {}, "runs": []}
    next_round: dict[str, int] = {}
    for doc in docs:
        out["settings"].update(doc.get("settings", {}))
        offset = dict(next_round)
        for run in doc.get("runs", []):
            moved = {**run, "round": run["round"] + offset.get(run["part"], 0)}
            out["runs"].append(moved)
            next_round[run["part"]] = max(next_round.get(run["part"], 0), moved["round"] + 1)
    return out
