"""The packaged executable: `make binary` builds dist/cdriver and it runs."""

from __future__ import annotations

import json
import subprocess

import pytest

import cdriver
from cdriver.checkout import REPO_ROOT

pytestmark = pytest.mark.e2e



def test_make_binary_builds_a_working_cdriver() -> None:
    build = subprocess.run(["make", "binary"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    exe = REPO_ROOT / "dist" / "cdriver"
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
