"""The side-by-side figures from recorded runs: medians and spread over interleaved rounds, the
Prepare calls of all rounds (failed and timed-out ones named with their durations), the merge
of documents made in parts, and the table `bench/versus.py --table` prints."""

from __future__ import annotations

from typing import Any

import versus_figures as vf


def run(driver: str, part: str, round_: int, load: float = 1.0, **figures: Any) -> dict[str, Any]:
    return {"driver": driver, "part": part, "round": round_, "commit": "abc1234", "load": [load, load + 1],
            "figures": figures}


def channel(driver: str, round_: int, seconds: float, calls: list[dict[str, Any]]) -> dict[str, Any]:
    return run(driver, "channel", round_, time_to_channel_n2_s=seconds) | {"prepare_calls": calls,
                                                                         "channel_claims": 2}


def call(ms: float, outcome: str = "ok", errors: int = 0) -> dict[str, Any]:
    return {"claims": 1, "errors": errors, "ms": ms, "outcome": outcome}


def test_a_figure_is_the_median_of_its_rounds_with_their_spread_and_count() -> None:
    doc = {"runs": [run("cdriver", "idle", r, plugin_idle_rss_mb=v) for r, v in enumerate([50, 70, 52, 51, 90])]}
    assert vf.summary(doc, "cdriver")["plugin_idle_rss_mb"] == {"median": 52, "min": 50, "max": 90, "n": 5}
    assert vf.cell(vf.summary(doc, "cdriver")["plugin_idle_rss_mb"]) == "52 (50–90, n=5)"
    assert vf.summary(doc, "upstream") == {}


def test_prepare_figures_pool_every_round_and_name_the_failed_and_timed_out_calls() -> None:
    doc = {"runs": [channel("upstream", 0, 10, [call(100), call(45012, "timeout")]),
                    channel("upstream", 1, 12, [call(300), call(200, "error", errors=1)])]}
    got = vf.summary(doc, "upstream")
    assert got["prepare_p50_ms"] == 200  # nearest rank over all four calls
    assert got["prepare_p99_ms"] == 45012
    assert got["prepare_ok_p50_ms"] == 100 and got["prepare_ok_p99_ms"] == 300  # the successful ones only
    assert got["prepare_calls_per_claim"] == 1.0
    assert got["prepare_not_ok"] == "2 of 4: error 200, timeout 45012"
    assert vf.summary({"runs": [channel("cdriver", 0, 5, [call(10)])]}, "cdriver")["prepare_not_ok"] == "0 of 1"


def test_ratios_divide_the_medians_and_leave_out_figures_without_one() -> None:
    doc = {"runs": [run("cdriver", "idle", r, plugin_idle_rss_mb=v, status_written_pct=100) for r, v in
                    enumerate([40, 50, 60])]
           + [run("upstream", "idle", r, plugin_idle_rss_mb=v, status_written_pct=3) for r, v in
              enumerate([100, 100, 10])]}
    assert vf.ratios(doc) == {"plugin_idle_rss_mb": 0.5}


def test_merge_joins_parts_and_renumbers_repeated_rounds() -> None:
    first = {"settings": {"domains": 500}, "runs": [run("cdriver", "channel", 0), run("upstream", "channel", 0),
                                                     run("cdriver", "channel", 1)]}
    second = {"settings": {"domains": 500, "high_limit": [1000, 2000]},
              "runs": [run("cdriver", "channel", 0), run("cdriver", "controller-high", 0)]}
    merged = vf.merge([first, second])
    assert [(r["driver"], r["part"], r["round"]) for r in merged["runs"]] == [
        ("cdriver", "channel", 0), ("upstream", "channel", 0), ("cdriver", "channel", 1),
        ("cdriver", "channel", 2), ("cdriver", "controller-high", 0)]
    assert merged["settings"] == {"domains": 500, "high_limit": [1000, 2000]}


def test_the_table_labels_the_controller_rows_with_the_limits_they_ran_at() -> None:
    doc = {"settings": {"domains": 500, "default_limits": {"cdriver": [50, 100], "upstream": [5, 10]},
                        "high_limit": [1000, 2000]},
           "runs": [run("cdriver", "controller-default", 0, load=2.0, controller_default_s=48.0) | {"domains": 100},
                    run("upstream", "controller-default", 0, load=3.5, controller_default_s=300.0) | {"domains": 100},
                    run("cdriver", "controller-high", 0, controller_high_s=10.5),
                    run("upstream", "controller-high", 0, controller_high_s=21.0)]}
    lines = vf.table(doc).splitlines()
    assert lines[:2] == ["| figure | cdriver | upstream | ratio |", "|---|---:|---:|---:|"]
    assert lines[2] == ("| controller, 100 CDs, default client limits (qps/burst: cdriver 50/100, upstream 5/10) (s)"
                        " | 48 | 300 | 0.16 |")
    assert lines[3] == "| controller, 500 CDs, both at client limit 1000/2000 (qps/burst) (s) | 10.5 | 21 | 0.5 |"
    assert len(lines) == 4  # figures no run measured are left out
    assert vf.caption(doc) == ("Measured at commit abc1234; rounds per part (drivers interleaved): "
                               "controller-default 1, controller-high 1; load average 1.0–4.5; "
                               "median (min–max, n) over the rounds.")


def test_numbers_show_three_significant_digits_and_nan_as_not_available() -> None:
    assert [vf.number(x) for x in (14278.5, 299.31, 17.6, 0.153, 0.0, float("nan"))] == [
        "14278", "299", "17.6", "0.153", "0", "n/a"]


def test_percentiles_are_nearest_rank() -> None:
    assert vf.percentile([300, 100], 50) == 100
    assert vf.percentile([1, 2, 3, 4], 50) == 2
    assert vf.percentile(list(range(1, 101)), 99) == 99
    assert vf.percentile([5], 99) == 5
