"""End-to-end fixtures: a whole simulated cluster (control plane + nodes + installed chart).

Every test collected under this folder carries the `e2e` marker. Each test module gets its own
world; its base directory is short because Unix socket paths under a node's root are limited to
107 bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.sim.world.world import SimWorld, WorldSettings
from tests.support.kinds import mark_kind

HERE = Path(__file__).parent

#: chart values for host-managed worlds: a Prepare gives up on a missing host IMEX service after
#: 5 s instead of 30 s (kubelet retries it), so tests that wait for failed attempts wait less
SHORT_HOST_WAIT = ["--set", "kubeletPlugin.env[0].name=PREPARE_TIMEOUT",
                   "--set", "kubeletPlugin.env[0].value=5s"]


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test under this folder is e2e."""
    mark_kind(item, HERE, pytest.mark.e2e)


def start_world(settings_kwargs: dict, name: str) -> Iterator[SimWorld]:
    # one fixed directory per world: a run killed midway leaves its files and processes there,
    # and the next run's nodes find and end those processes when they start
    base = Path(f"/tmp/cde-{os.getuid()}-{name}")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    # fast retries and heartbeats: the default is kubelet's timings (sim up, demo, benchmarks)
    world = SimWorld(WorldSettings(base_dir=base, **{"fast": True, **settings_kwargs}), progress=print)
    world.start()
    try:
        yield world
    finally:
        world.stop()
        if os.environ.get("CDRIVER_E2E_KEEP"):
            print(f"e2e world files kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data or ""


def exec_in(world: SimWorld, namespace: str, pod: dict, argv: list[str],
            container: str | None = None) -> subprocess.CompletedProcess:
    """`kubectl exec` into a pod's container (the simulated node serves the kubelet API)."""
    return world.exec(namespace, pod["metadata"]["name"], argv, container)


@pytest.fixture
def e2e_namespace(request: pytest.FixtureRequest) -> str:
    """A namespace name unique to the test (created by the scenario helpers)."""
    name = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")
    return ("e2e-" + "".join(ch for ch in name if ch.isalnum() or ch == "-"))[:60].rstrip("-")
