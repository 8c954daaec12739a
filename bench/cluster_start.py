"""Benchmark: warm start-to-ready time of the local control plane, and the raw API write rate.

The write rate (ConfigMaps created one after another by a plain `RawClient` loop) is the
baseline later benchmarks compare against. Binaries come from the build cache (a cold build is
done first if needed and is not part of the measurement).

    python bench/cluster_start.py [--starts 3] [--objects 500] [--json-out FILE]

Prints a table; writes JSON to bench/results/cluster_start.json (or --json-out).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from report import print_rows  # bench/report.py (scripts run from bench/)

from cdriver.kube.resources import RESOURCES
from cdriver.sim.controlplane.binaries import control_plane_binaries
from cdriver.sim.controlplane.cluster import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results" / "cluster_start.json"


def measure_starts(n: int) -> tuple[list[float], list[float]]:
    """Start and stop `n` fresh control planes; (start-to-ready seconds, stop seconds)."""
    binaries = control_plane_binaries()
    starts, stops = [], []
    for _ in range(n):
        cluster = LocalCluster(binaries=binaries)
        t0 = time.perf_counter()
        cluster.start()
        starts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cluster.stop()
        stops.append(time.perf_counter() - t0)
    return starts, stops


def measure_writes(objects: int) -> dict[str, float]:
    """Create, then read back, `objects` ConfigMaps one at a time in a fresh namespace."""
    with LocalCluster() as cluster:
        raw = cluster.raw
        cluster.create_namespace("bench")
        configmaps = RESOURCES["configmaps"]
        for i in range(10):  # warm up connections and caches
            raw.create(configmaps, {"metadata": {"name": f"warm-{i}"}, "data": {"i": str(i)}}, "bench")
        t0 = time.perf_counter()
        for i in range(objects):
            raw.create(configmaps, {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}}, "bench")
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(objects):
            raw.get(configmaps, f"cm-{i}", "bench")
        read_s = time.perf_counter() - t0
    return {"objects": objects, "create_per_s": objects / write_s, "get_per_s": objects / read_s,
            "create_ms_mean": 1000 * write_s / objects, "get_ms_mean": 1000 * read_s / objects}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3, help="warm starts to time (default 3)")
    parser.add_argument("--objects", type=int, default=500, help="ConfigMaps to create (default 500)")
    parser.add_argument("--json-out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    control_plane_binaries()  # build (cold) outside the measurement
    starts, stops = measure_starts(args.starts)
    writes = measure_writes(args.objects)
    result = {
        "benchmark": "cluster_start",
        "python": platform.python_version(),
        "warm_start_s": {"runs": starts, "median": statistics.median(starts), "max": max(starts)},
        "stop_s": {"runs": stops, "median": statistics.median(stops)},
        "raw_write": writes,
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")

    rows = [
        ("warm start to ready (median)", f"{result['warm_start_s']['median']:.2f} s"),
        ("warm start to ready (max)", f"{result['warm_start_s']['max']:.2f} s"),
        ("stop (median)", f"{result['stop_s']['median']:.2f} s"),
        (f"raw create, {writes['objects']} ConfigMaps", f"{writes['create_per_s']:.0f} objects/s"
         f" ({writes['create_ms_mean']:.2f} ms each)"),
        (f"raw get, {writes['objects']} ConfigMaps", f"{writes['get_per_s']:.0f} objects/s"
         f" ({writes['get_ms_mean']:.2f} ms each)"),
    ]
    print_rows(rows, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
