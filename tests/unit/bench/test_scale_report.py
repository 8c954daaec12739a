"""The rack-scale report from recorded runs: percentiles, medians per driver and size, the table
`bench/scale.py --table` prints, and the API server metric lines it reads."""

from __future__ import annotations

from typing import Any

import scale


def run(driver: str, nodes: int, round_: int, kind: str | None = None, domains: int = 0,
        **figures: Any) -> dict[str, Any]:
    out = {"driver": driver, "nodes": nodes, "round": round_, "commit": "abc1234", "limits": "matched",
           "client_limit": [1000, 2000], "load": [1.0, 2.5], "figures": figures}
    if kind:  # records written before the scenarios had none: they are "rack"
        out |= {"scenario": kind, "domains": domains}
    return out


def test_percentiles_pick_a_measured_value() -> None:
    values = [float(v) for v in range(1, 11)]
    assert (scale.pct(values, 50), scale.pct(values, 90), scale.pct([3.0], 90)) == (5.0, 9.0, 3.0)


def test_the_table_shows_medians_per_size_with_the_ratio_and_the_commit() -> None:
    p50 = "time_to_channel_p50_s"
    doc = {"runs": [run("cdriver", 18, 0, **{p50: 10.0}), run("cdriver", 18, 1, **{p50: 14.0}),
                    run("upstream", 18, 0, **{p50: 24.0}), run("upstream", 18, 1, **{p50: 24.0}),
                    run("cdriver", 4, 0, **{p50: 4.0}, daemon_index_p50_s=0.2)]}
    assert scale.medians(doc)[("cdriver", 18)]["time_to_channel_p50_s"] == 12.0
    text = scale.table(doc)
    assert "| time to channel, p50 (s) | 12 | 24 | 0.50 |" in text
    assert "| daemon start to index, p50 (s) | 0.2 | – |  |" in text  # cdriver only: no ratio
    assert text.index("**N = 4 nodes**") < text.index("**N = 18 nodes** (2 round(s) per driver)")
    assert "Measured at commit abc1234" in text and "matched (1000/2000)" in text


def test_burst_and_many_domain_runs_get_sections_of_their_own() -> None:
    doc = {"runs": [run("cdriver", 18, 0, time_to_channel_p50_s=15.0),
                    run("cdriver", 18, 0, "burst", all_indices_s=3.0, backlog_pods=1500, api_429=0),
                    run("upstream", 18, 0, "burst", all_indices_s=12.0, backlog_pods=1500, api_429=4),
                    run("cdriver", 72, 0, "many", 500, controller_s=9.0, controller_rss_mb=60.0),
                    run("upstream", 72, 0, "many", 500, controller_s=45.0, controller_rss_mb=80.0),
                    run("cdriver", 72, 0, "many", 1000, controller_s=10.0, controller_rss_mb=None)]}

    assert scale.medians(doc)[("cdriver", 18)] == {"time_to_channel_p50_s": 15.0}  # the burst is apart
    text = scale.table(doc)
    burst = text.index("**Burst: 18 daemons join one clique beside a scheduling backlog** (1 round(s)")
    assert text.index("**N = 18 nodes**") < burst < text.index("**500 ComputeDomains of 1–2 nodes on 72 nodes**")
    assert "| domain created to every daemon's index (s) | 3 | 12 | 0.25 |" in text[burst:]
    assert "| 429 responses | 0 | 4 | 0.00 |" in text[burst:]
    assert "| created to every template and DaemonSet (s) | 9 | 45 | 0.20 |" in text
    thousand = text[text.index("**1000 ComputeDomains"):]
    assert "| controller RSS with that many domains (MB) |" not in thousand.split("(Measured")[0]  # None: unmeasured


def test_api_server_samples_and_their_growth() -> None:
    text = ('# HELP apiserver_request_total x\n'
            'apiserver_request_total{code="409",component="apiserver",resource="computedomaincliques",'
            'subresource="",verb="PUT",version="v1beta1"} 7\n'
            'apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 3\n'
            'apiserver_request_total_other{code="200"} 1\n')

    counts = scale.request_counts(text)
    assert counts == {("computedomaincliques", "", "PUT", "409"): 7.0, ("pods", "status", "PATCH", "200"): 3.0}
    assert scale.delta(counts, {("pods", "status", "PATCH", "200"): 3.0}) == {
        ("computedomaincliques", "", "PUT", "409"): 7.0}
