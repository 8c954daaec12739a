"""What the builds say before and while they run: the plan of hack/plan.sh, the heartbeat of a
long build, and which parts each make goal builds."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from cdriver.checkout import REPO_ROOT

ROOT = REPO_ROOT


def plan(cache: Path, *components: str, **env: str) -> str:
    out = subprocess.run(["bash", str(ROOT / "hack" / "plan.sh"), *components], capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(cache), **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # everything goes to the terminal (stderr); stdout stays for results
    return out.stderr


def test_plan_of_a_cold_cache_names_each_part_and_its_time_and_builds_nothing(tmp_path: Path) -> None:
    text = plan(tmp_path, "all")
    assert "to build now" in text
    for line in ("etcd v3.6.16                 under 1 min", "kube v1.37.2                 about 7 min",
                 "helm v3.22.0-kube1.37        about 1 min", "in all: about 9 min"):
        assert line in text, text
    assert "kube v1.33" not in text and "kubelet" not in text
    assert [p.name for p in (tmp_path / "cdriver").iterdir()] == []


def test_plan_of_the_test_parts_names_prometheus(tmp_path: Path) -> None:
    text = plan(tmp_path, "prometheus")
    assert "prometheus v0.316.0          about 2 min" in text, text
    assert [p.name for p in (tmp_path / "cdriver").iterdir()] == []


def test_plan_says_what_is_cached(tmp_path: Path) -> None:
    cold = plan(tmp_path, "etcd")
    assert "etcd v3.6.16" in cold
    # a finished build is a directory with the .complete marker, as hack/lib/cache.sh leaves it
    module = ROOT / "hack" / "kube" / "etcd"
    digest = subprocess.run(["bash", "-c", f"cat {module}/go.mod {module}/go.sum | sha256sum | cut -c1-12"],
                            capture_output=True, text=True, check=True).stdout.strip()
    done = tmp_path / "cdriver" / f"etcd-v3.6.16-{digest}"
    done.mkdir(parents=True)
    (done / ".complete").touch()
    warm = plan(tmp_path, "etcd", "etcd")
    assert "cached: etcd v3.6.16" in warm and "nothing to build" in warm, warm


def test_plan_without_the_upstream_tarball_says_it_is_skipped(tmp_path: Path) -> None:
    text = plan(tmp_path, "checkpoint-reader", "peer", CDRIVER_PEERS_DIR=str(tmp_path / "none"))
    assert "skipped: upstream checkpoint reader (no upstream source tarball" in text
    assert "skipped: upstream driver (no upstream source tarball" in text and "nothing to build" in text


def test_a_long_build_says_every_interval_that_it_is_still_building(tmp_path: Path) -> None:
    script = tmp_path / "build.sh"
    script.write_text(f"""set -euo pipefail
log() {{ echo "[test] $*" >&2; }}
source {ROOT / "hack" / "lib" / "cache.sh"}
slow() {{ sleep 2.5; touch "$1/bin"; }}
cached_build {tmp_path / "out"} "slow v1: " slow
echo out={tmp_path / "out"}
""")
    start = time.monotonic()
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "CDRIVER_BUILD_HEARTBEAT_S": "1"})
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - start < 10  # the heartbeat does not hold the output open after the build
    lines = out.stderr.splitlines()
    assert "[test] slow v1: still building (1s)" in lines and "[test] slow v1: still building (2s)" in lines
    assert lines[-1].startswith("[test] slow v1: built in ")
    assert (tmp_path / "out" / ".complete").exists() and out.stdout == f"out={tmp_path / 'out'}\n"


def make_dry_run(*args: str) -> list[str]:
    out = subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.strip() for line in out.stdout.splitlines() if line.startswith("hack/")]


def test_demo_builds_only_what_the_demo_runs() -> None:
    assert make_dry_run("demo") == ["hack/plan.sh all", "hack/kube/build.sh all"]
    assert make_dry_run("demo", "REAL_NODES=2") == ["hack/plan.sh all node", "hack/kube/build.sh all",
                                                    "hack/kube/build.sh node"]


def test_test_builds_the_rest() -> None:
    lines = make_dry_run("test")
    assert lines[0] == "hack/plan.sh all kube-1.33 checkpoint-reader prometheus node peer"
    for build in ("hack/kube/build.sh all", "hack/kube/build.sh kube-1.33", "hack/kube/build.sh prometheus",
                  "hack/kube/build.sh node"):
        assert build in lines
    assert any(line.startswith("hack/peer-checkpoint/build.sh") for line in lines)
    assert any(line.startswith("hack/peer/build.sh") for line in lines)
