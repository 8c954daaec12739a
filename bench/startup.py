"""Cold start of `cdriver version`: packaged binary vs `python -m cdriver`.

Prints JSON (one object) and a table. Builds the binary first if dist/cdriver is missing.
Target: packaged binary median <= 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from cdriver.checkout import REPO_ROOT


def time_command(argv: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    exe = REPO_ROOT / "dist" / "cdriver"
    if not exe.exists():
        subprocess.run(["make", "binary"], cwd=REPO_ROOT, check=True)
    results = {}
    for label, argv in (("binary", [str(exe), "version"]),
                        ("python -m", [sys.executable, "-m", "cdriver", "version"])):
        samples = time_command(argv, args.runs)
        results[label] = {"median_s": round(statistics.median(samples), 4),
                          "min_s": round(min(samples), 4), "max_s": round(max(samples), 4), "runs": args.runs}
    results["target_binary_median_s"] = 0.3
    results["binary_meets_target"] = results["binary"]["median_s"] <= 0.3
    print(json.dumps(results))
    print(f"{'command':<12} {'median s':>9} {'min s':>7} {'max s':>7}")
    for label in ("binary", "python -m"):
        r = results[label]
        print(f"{label:<12} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['max_s']:>7.3f}")


if __name__ == "__main__":
    main()
