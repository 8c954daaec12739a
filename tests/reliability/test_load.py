"""Load: ComputeDomains with two workload pods each, run through the cliques in bounded
batches and then all deleted, for several rounds.

Per round: the time until every batch's channels are visible inside its containers and their
IMEX domains UP (read with exec, summed over batches; how many containers were read), the time
until nothing of the round remains, API requests per domain (all clients, from the API
server's counters, and the controller's own writes), and leak checks: no node label, clique,
CDI spec, checkpoint entry, per-domain directory or nvidia-imex process left; the file
descriptors and memory of the controller and kubelet plugins after each round.
"""

from __future__ import annotations

import copy
import time
import urllib.request
from typing import Any

import pytest

from cdriver.api import constants
from cdriver.sim.world import scenario
from tests.reliability import cluster as rc
from tests.reliability.figures import FULL, record, size
from tests.support.waiting import wait_for

DOMAINS = size(2, 50)
ROUNDS = size(2, 3)
CREATE_BATCH = 10
TIMEOUT = 180.0
#: Growth allowed between the first round and the last (a leak grows with every round).
FD_SLACK = 16
RSS_SLACK = 48 * 1024 * 1024


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def apiserver_requests(world: Any) -> float:
    return metric_sum(str(world.raw.request("GET", "/metrics")), "apiserver_request_total")


def controller_writes(world: Any, timeout: float = 90.0) -> float:
    """The controller's write counter; waits for its endpoint while an earlier kill test's
    replacement controller is still starting (connection refused until it listens)."""
    url = f"http://127.0.0.1:{world.settings.controller_metrics_port}/metrics"

    def scraped() -> tuple[float] | None:  # a tuple: a count of 0 is an answer too
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - a local URL
                return (metric_sum(resp.read().decode(), "cdriver_controller_api_writes_total"),)
        except OSError:
            return None

    return wait_for(f"the controller's metrics endpoint {url}", scraped, timeout, 0.5)[0]


def run_round(world: Any, ns: str, round_no: int) -> dict[str, Any]:
    names = [f"r{round_no}d{i}" for i in range(DOMAINS)]
    cliques = rc.cliques(world)
    requests_before, writes_before = apiserver_requests(world), controller_writes(world)
    execs_before = copy.copy(rc.EXECS)
    for start in range(0, len(names), CREATE_BATCH):
        for name in names[start:start + CREATE_BATCH]:
            rc.create_retrying(world, scenario.CDS, scenario.compute_domain(name, ns, f"{name}-channel"), ns)
        scenario.wait_for(f"claim templates of {names[start:start + CREATE_BATCH]}", lambda s=start: all(
            world.raw.get_or_none(scenario.RCTS, f"{n}-channel", ns) for n in names[s:s + CREATE_BATCH]), TIMEOUT)
    visible_s, survived, lost = 0.0, 0, []
    for start in range(0, len(names), len(cliques)):
        batch = names[start:start + len(cliques)]
        t0 = time.monotonic()
        for name, clique in zip(batch, cliques, strict=False):
            for i in range(2):
                pod = scenario.workload_pod(f"{name}-w{i}", ns, f"{name}-channel", clique=clique,
                                            group=f"{ns}-{name}")
                rc.create_retrying(world, scenario.PODS, pod, ns)
        pods = [f"{n}-w{i}" for n in batch for i in range(2)]
        found = rc.converged(world, f"channels of {batch}", TIMEOUT, extra=rc.pods_running(world, ns, pods))
        visible_s += time.monotonic() - t0
        for pod in pods:
            rc.delete_quietly(world, scenario.PODS, pod, ns)
        found += rc.converged(world, f"workloads of {batch} gone", TIMEOUT,
                              extra=lambda d, p=pods: [f"pod {n} remains" for n in p if any(
                                  x["metadata"]["name"] == n and x["metadata"]["namespace"] == ns
                                  for x in d.get("pods") or [])])
        if found:
            lost.append(f"{batch}: {found[:5]}")
        else:
            survived += len(batch)
    t0 = time.monotonic()
    for name in names:
        rc.delete_quietly(world, scenario.CDS, name, ns)
    leftovers = rc.converged(world, f"round {round_no} deleted", TIMEOUT, extra=rc.gone(world, ns, names))
    gone_s = time.monotonic() - t0
    if leftovers:
        lost.append(f"deletion of round {round_no}: {leftovers[:5]}")
    return {"domains": len(names), "survived": survived if not leftovers else 0, "lost": lost,
            "visible_s": visible_s, "gone_s": gone_s,
            "requests": (apiserver_requests(world) - requests_before) / len(names),
            "writes": (controller_writes(world) - writes_before) / len(names),
            "leaks": leaks(world), "fds": rc.roles_fds(world), "rss": rc.roles_memory(world),
            "execs": rc.EXECS.since(execs_before)}


def leaks(world: Any) -> list[str]:
    """Anything a finished round must not leave: labels, cliques, node files, IMEX processes."""
    data = rc.snapshot(world)
    out = [f"node {n['metadata']['name']} keeps label {constants.LABEL_COMPUTE_DOMAIN}"
           for n in data["nodes"] if constants.LABEL_COMPUTE_DOMAIN in (n["metadata"].get("labels") or {})]
    out += [f"clique {c['metadata']['name']} remains" for c in data["cliques"]]
    for node, files in data["nodeFiles"].items():
        live = {u: r for u, r in (files.get("checkpoint") or {}).items() if r.get("state") != "PrepareAborted"}
        out += [f"{node}: checkpoint entry {r.get('namespace')}/{r.get('name')} ({r.get('state')})"
                for r in live.values()]
        out += [f"{node}: CDI spec of claim {u}" for u in files.get("cdiClaims") or []]
        out += [f"{node}: directory of domain {d}" for d in files.get("domainDirs") or []]
    out += [f"nvidia-imex process {pid} still runs" for pid in rc.imex_processes()]
    return out


@pytest.mark.timeout(size(600, 3600))  # the full run is far longer than the default limit
def test_load_rounds_converge_and_leak_nothing(rel_world: Any, rel_namespace: str) -> None:
    rounds = [run_round(rel_world, rel_namespace, r) for r in range(ROUNDS)]
    for r, result in enumerate(rounds):
        record("load", f"round {r + 1}: {result['domains']} domains x 2 pods", result["domains"],
               result["survived"], channels_visible_s=round(result["visible_s"], 1),
               all_gone_s=round(result["gone_s"], 1), api_requests_per_domain=round(result["requests"]),
               controller_writes_per_domain=round(result["writes"], 1), **result["execs"], leaks=len(result["leaks"]),
               fds=result["fds"], rss_mib={k: round(v / 2**20) for k, v in result["rss"].items()})
    first, last = rounds[0], rounds[-1]
    growth = {role: last["rss"].get(role, 0) - first["rss"].get(role, 0) for role in first["rss"]}
    fd_growth = {role: last["fds"].get(role, 0) - first["fds"].get(role, 0) for role in first["fds"]}
    record("load", f"growth round 1 -> {len(rounds)}", len(growth), sum(
        growth[r] <= RSS_SLACK and fd_growth.get(r, 0) <= FD_SLACK for r in growth),
        rss_kib={k: v // 1024 for k, v in growth.items()}, fds=fd_growth, full=FULL)
    assert all(not r["lost"] for r in rounds), [r["lost"] for r in rounds]
    assert all(not r["leaks"] for r in rounds), [r["leaks"] for r in rounds]
    assert all(v <= FD_SLACK for v in fd_growth.values()), f"file descriptors grew: {fd_growth}"
    assert all(v <= RSS_SLACK for v in growth.values()), f"memory grew (bytes): {growth}"
