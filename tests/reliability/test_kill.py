"""Kill at random points: SIGKILL each role (kubelet plugin, controller, IMEX daemon, the
nvidia-imex under it) and restart kube-apiserver and etcd with SIGKILL, each at a random
moment of a ComputeDomain's life (created, workloads starting and running, deleted).

After every kill the cluster converges: the workloads run and see their channels inside
their containers, every invariant of `tests.reliability.invariants` and `.inside` holds (the
IMEX daemon pod on each workload's node Ready, its clique entry Ready, `nvidia-imex-ctl -N`
in it reporting the domain UP), the killed role runs again, and the deletion completes leaving
nothing behind. The seed is printed; CDRIVER_RELIABILITY_SEED repeats a run.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from typing import Any

import pytest

from cdriver.sim.node.simulated.runtime import NodeOptions
from tests.reliability import cluster as rc
from tests.reliability.figures import TIMINGS, TIMINGS_FAST, record, size

#: CDRIVER_RELIABILITY_KILLS sets the kills per role (a quarter as many control-plane restarts)
KILLS_PER_ROLE = int(os.environ.get("CDRIVER_RELIABILITY_KILLS") or size(1, 20))
RESTARTS_PER_CONTROL_PLANE_PART = max(1, KILLS_PER_ROLE // 4)
#: A kill lands up to this many seconds after the domain is created (its workloads start
#: then), or up to DELETE_WINDOW seconds after its deletion begins.
CREATE_WINDOW = 6.0
DELETE_WINDOW = 1.5
#: With kubelet's timings a container killed again and again waits out its crash-loop backoff
#: (up to 300 s) before it restarts: that comes on top.
SLOW = TIMINGS != TIMINGS_FAST
CONVERGE_TIMEOUT = 120.0 + (NodeOptions().backoff_max if SLOW else 0.0)
MAX_LOST = 2


def wanted() -> dict[str, int]:
    return {**{r: KILLS_PER_ROLE for r in rc.NODE_ROLES},
            **{r: RESTARTS_PER_CONTROL_PLANE_PART for r in rc.CONTROL_PLANE}}


def run_cycle(world: Any, ns: str, index: int, role: str, rng: random.Random) -> tuple[rc.Kill, list[str]]:
    """One domain's life with one kill in it; the violations left after it (none = survived)."""
    clique = rc.cliques(world)[index % 2]
    nodes = rc.clique_nodes(world, clique)
    name = f"k{index}"
    cycle = rc.Cycle(name)
    anchor = rng.choice(["create", "delete"])
    kill = rc.Kill(role, anchor, rng.uniform(0.0, CREATE_WINDOW if anchor == "create" else DELETE_WINDOW))
    stop = threading.Event()
    thread = rc.killer(world, kill, cycle, nodes, stop)
    try:
        cycle.moments["create"].set()
        cycle.uid = rc.start_domain(world, ns, name, clique)
        cycle.phase = "starting"
        pods = [f"{name}-w{i}" for i in range(2)]
        lost = rc.converged(world, f"{name} running after killing {role}", CONVERGE_TIMEOUT,
                            extra=rc.pods_running(world, ns, pods))
        cycle.phase = "running"
        if anchor == "create":  # its moment may still be ahead: the domain lives until then
            deadline = time.monotonic() + CREATE_WINDOW + rc.KILL_PATIENCE
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(timeout=0.2)
            if kill.done:  # after a kill the domain must run again before the deletion
                back = rc.converged(world, f"{name} running after killing {role}", CONVERGE_TIMEOUT,
                                    extra=rc.all_of(rc.pods_running(world, ns, pods),
                                                    rc.role_back(world, kill, cycle.uid)))
                if not back and not lost:
                    kill.recovered_after = time.monotonic() - cycle.started - kill.at
                lost += back
        cycle.phase = "deleting"
        cycle.moments["delete"].set()
        rc.delete_domain(world, ns, name)
        lost += rc.converged(world, f"{name} deleted after killing {role}", CONVERGE_TIMEOUT,
                             extra=rc.gone(world, ns, [name]))
        cycle.phase = "deleted"
        if role not in (rc.DAEMON_ROLE, rc.IMEX_ROLE):  # a daemon of a deleted domain never comes back
            thread.join(timeout=DELETE_WINDOW + rc.KILL_PATIENCE)
        if kill.done and kill.phase == "deleted":
            lost += rc.converged(world, f"idle after killing {role}", CONVERGE_TIMEOUT)
    finally:
        stop.set()
        thread.join(timeout=60)
    return kill, lost


def recovery_figure(seconds: list[float]) -> dict[str, dict[str, float]]:
    """How many kills hit a live domain (starting or running), and the median and longest time
    from such a kill until the domain ran again."""
    if not seconds:
        return {}
    return {"back_s": {"n": len(seconds), "median": round(statistics.median(seconds), 1),
                       "max": round(max(seconds), 1)}}


@pytest.mark.timeout(size(600, 3600) * (3 if SLOW else 1))  # far longer than the default limit
def test_kill_at_random_points(rel_world: Any, rel_namespace: str) -> None:
    seed = int(os.environ.get("CDRIVER_RELIABILITY_SEED") or random.SystemRandom().randrange(2**31))
    print(f"kill seed: {seed} (repeat with CDRIVER_RELIABILITY_SEED={seed})")
    rng = random.Random(seed)
    tried: dict[str, int] = {}
    survived: dict[str, int] = {}
    phases: dict[str, list[str]] = {}
    recovery: dict[str, list[float]] = {}
    failures: list[str] = []
    started = time.monotonic()
    want = wanted()
    index = 0
    while len(failures) < MAX_LOST and index < 3 * sum(want.values()):
        missing = [r for r, n in want.items() if tried.get(r, 0) < n]
        if not missing:
            break
        role = rng.choice(missing)
        kill, lost = run_cycle(rel_world, rel_namespace, index, role, rng)
        index += 1
        if not kill.done:  # the role's process did not exist at its moment: try again later
            print(f"cycle {index}: {role} was not running at its moment; no kill")
            continue
        tried[role] = tried.get(role, 0) + 1
        phases.setdefault(role, []).append(kill.phase)
        if kill.recovered_after is not None:
            recovery.setdefault(role, []).append(kill.recovered_after)
        print(f"cycle {index}: killed {role} (pid {kill.pid}) {kill.at:.1f} s in, while {kill.phase}: "
              f"{'converged' if not lost else 'LOST'}")
        if lost:
            failures.append(f"{role} killed {kill.at:.1f} s in while {kill.phase}: {lost[:5]}")
        else:
            survived[role] = survived.get(role, 0) + 1
    for role in (*rc.NODE_ROLES, *rc.CONTROL_PLANE):
        what = f"SIGKILL {role}" if role in rc.NODE_ROLES else f"restart {role} (SIGKILL)"
        seen = phases.get(role, [])
        record("kill", what, tried.get(role, 0), survived.get(role, 0), seed=seed,
               phases=",".join(f"{p}:{seen.count(p)}" for p in sorted(set(seen))),
               **recovery_figure(recovery.get(role, [])))
    print(f"kill run took {time.monotonic() - started:.0f} s")
    assert not failures, "the cluster did not converge after:\n" + "\n".join(failures)
    assert all(tried.get(r, 0) >= n for r, n in want.items()), f"kills done {tried}, wanted {want}"
