"""The packaged executable: `make binary` builds dist/cdriver, it runs, and it holds what a node runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import cdriver
from cdriver.checkout import REPO_ROOT
from cdriver_build.bundle import LEFT_OUT, bundled_modules, left_out

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def exe() -> Path:
    build = subprocess.run(["make", "binary"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return REPO_ROOT / "dist" / "cdriver"


def test_make_binary_builds_a_working_cdriver(exe: Path) -> None:
    assert exe.exists()
    out = subprocess.run([str(exe), "version", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["cdriver"] == cdriver.__version__
    assert info["kubernetes"] == cdriver.KUBERNETES_VERSION
    assert info["frozen"] is True
    # Every role's subcommand is bundled (lazy imports must be collected by the spec).
    helptext = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60).stdout
    for role in ("controller", "kubelet-plugin", "imex-daemon", "sim"):
        assert role in helptext
    # The IMEX config template travels with the binary.
    tmpl = list((REPO_ROOT / "dist" / "cdriver-bundle").rglob("imexd.tmpl.cfg"))
    assert tmpl, "IMEX config template missing from the bundle"


def test_the_bundle_holds_what_a_node_runs_and_no_builder_or_harness(exe: Path) -> None:
    modules = bundled_modules(exe.resolve())
    top_level = {m.split(".")[0] for m in modules}
    assert "cdriver_build" not in top_level, "the image builder is in the executable"
    assert [m for m in modules if left_out(m)] == [], f"left out by the spec but bundled (see {LEFT_OUT})"
    sim = {".".join(m.split(".")[:3]) for m in modules if m.startswith("cdriver.sim.")}
    assert sim == {"cdriver.sim.cli", "cdriver.sim.gpu", "cdriver.sim.imex", "cdriver.sim.controlplane"}
    assert [m for m in modules if m.startswith("cdriver.sim.controlplane.")] == ["cdriver.sim.controlplane.pidfile"]
    for shipped in ("cdriver.cli", "cdriver.roles.controller.main", "cdriver.roles.kubelet_plugin.main",
                    "cdriver.roles.imex_daemon.main", "cdriver.roles.host_check", "cdriver.roles.crd_apply",
                    "cdriver.diagnose.cli", "cdriver.sim.imex.nvidia_imex", "cdriver.sim.gpu.check_fabric",
                    "kubernetes.client", "kubernetes.config"):
        assert shipped in modules
    # the generated kubernetes client is there for cdriver.kube.client's fallback only: what
    # `from kubernetes import client, config` loads, not its asyncio copy
    assert not [m for m in modules if m.startswith("kubernetes.aio")]
