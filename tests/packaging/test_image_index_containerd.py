"""A real containerd and the two-platform driver image: it imports the image index and runs the amd64 image.

containerd (the one real nodes run, `make node-parts`) is started alone with its own root,
state and socket below a temporary folder, in a mount namespace of its own. The driver
image's archive (an image index of linux/amd64 and linux/arm64, as `make image` writes it) is
imported under its reference; containerd chooses the manifest of this machine's platform, and
a container started from the reference runs the amd64 bundle. The arm64 image, imported too,
cannot run in containerd here (no arm64 processor, and containerd's runc does not run inside
the emulating user namespace): the test holds containerd to the error that says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import cdriver
from cdriver.sim.node.real.node import node_binaries
from cdriver_build import platforms
from cdriver_build.build import ImageArchive, ensure_images
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(5400), pytest.mark.multiplatform]

START_TIMEOUT_S = 30


class Containerd:
    """A containerd of its own and the ctr that talks to it."""

    def __init__(self, base: Path) -> None:
        self.binaries = node_binaries(echo=False)
        self.base = base
        self.socket = base / "containerd.sock"
        config = base / "config.toml"
        config.write_text(f'version = 3\nroot = "{base / "root"}"\nstate = "{base / "state"}"\n'
                          f'[grpc]\n  address = "{self.socket}"\n')
        self.env = {**os.environ, "PATH": os.pathsep.join([str(self.binaries.containerd_dir),
                                                           str(self.binaries.runc.parent),
                                                           os.environ.get("PATH", "/usr/bin:/bin")])}
        self.log = open(base / "containerd.log", "w")
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                      str(self.binaries.containerd_dir / "containerd"), "--config", str(config)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        wait_for(lambda: f"containerd to answer on {self.socket}: {(base / 'containerd.log').read_text()}",
                 self.answers, timeout=START_TIMEOUT_S, interval=0.2)

    def answers(self) -> bool:
        """containerd serves its socket (and has not exited)."""
        assert self.proc.poll() is None, (self.base / "containerd.log").read_text()
        return self.socket.exists() and self.ctr("version").returncode == 0

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binaries.ctr), "--address", str(self.socket), "--namespace", "cdriver-test",
                               *args], capture_output=True, text=True, timeout=timeout, env=self.env)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def driver() -> ImageArchive:
    return ensure_images(["cdriver"], targets=list(platforms.PLATFORMS.values()))["cdriver"]


@pytest.fixture(scope="module")
def containerd() -> Iterator[Containerd]:
    base = Path(tempfile.mkdtemp(prefix="ctrd-"))  # short: the socket path must fit a Unix address
    daemon = Containerd(base)
    yield daemon
    daemon.stop()
    shutil.rmtree(base, ignore_errors=True)


def test_containerd_runs_the_amd64_image_of_the_index(containerd: Containerd, driver: ImageArchive) -> None:
    assert platforms.native() == platforms.AMD64
    imported = containerd.ctr("images", "import", "--local", "--snapshotter", "native", "--all-platforms",
                              "--index-name", driver.ref, str(driver.archive))
    assert imported.returncode == 0, imported.stderr
    listed = containerd.ctr("images", "ls")
    line = next((row for row in listed.stdout.splitlines() if row.startswith(driver.ref + " ")), "")
    assert "linux/amd64" in line and "linux/arm64" in line, listed.stdout
    run = containerd.ctr("run", "--rm", "--snapshotter", "native", driver.ref, "index-amd64",
                         "/bin/sh", "-c", "uname -m; cdriver version --json")
    assert run.returncode == 0, run.stdout + run.stderr
    machine, version = run.stdout.splitlines()[:2]
    assert machine == "x86_64"
    assert json.loads(version)["cdriver"] == cdriver.__version__


def test_containerd_reports_why_the_arm64_image_cannot_run_here(containerd: Containerd,
                                                                 driver: ImageArchive) -> None:
    imported = containerd.ctr("images", "import", "--local", "--snapshotter", "native", "--all-platforms",
                              "--index-name", driver.ref, str(driver.archive))
    assert imported.returncode == 0, imported.stderr
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    assert not (binfmt / "qemu-aarch64").exists(), "this machine runs arm64 programs itself: the premise is gone"
    run = containerd.ctr("run", "--rm", "--snapshotter", "native", "--platform", "linux/arm64", driver.ref,
                         "index-arm64", "/usr/bin/cdriver", "version")
    assert run.returncode != 0
    assert "exec format error" in (run.stdout + run.stderr).lower(), run.stdout + run.stderr
