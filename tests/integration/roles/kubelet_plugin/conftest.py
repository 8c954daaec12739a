"""The kubelet plugin tests' fixtures: the chart's CRDs, a driver namespace, a registered node
with a simulated driver root (per module), and plugin processes (per test)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdriver.api.constants import LABEL_COMPUTE_DOMAIN
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from tests.support.plugin_process import PluginProcess, SimNode, sim_node

NODES = RESOURCES["nodes"]


@pytest.fixture(scope="module")
def crds(chart_crds: None) -> None:
    """The chart's CRDs, installed once per session (tests/conftest.py)."""


@pytest.fixture(scope="module")
def driver_ns(cluster: Any, raw: RawClient, crds: None) -> Iterator[str]:
    name = f"drv-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(name)
    yield name
    try:
        raw.delete(RESOURCES["namespaces"], name)
    except ApiError:
        pass


@pytest.fixture(scope="module")
def node(raw: RawClient, crds: None) -> Iterator[SimNode]:
    base = Path(f"/tmp/kpt-{uuid.uuid4().hex[:6]}")
    base.mkdir()
    sim = sim_node(raw, base, fabric=True)
    yield sim
    sim.registered.delete()
    subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.fixture
def plugin_factory(cluster: Any, driver_ns: str) -> Iterator[Callable[..., PluginProcess]]:
    started: list[PluginProcess] = []

    def make(sim: SimNode, extra_args: list[str] | None = None, gates: str = "", beside: PluginProcess | None = None,
             pod_uid: str = "") -> PluginProcess:
        """A plugin for `sim`; `beside`: another instance on the same node (its directories), as the
        old and the new pod of a rolling update (give each a `pod_uid`)."""
        if beside is not None:
            base = beside.base
        else:
            base = Path(f"/tmp/kpp-{uuid.uuid4().hex[:6]}")
            base.mkdir()
        p = PluginProcess(sim, Path(cluster.kubeconfig), driver_ns, base, list(extra_args or []), gates,
                          pod_uid=pod_uid)
        started.append(p)
        return p.start()

    yield make
    problems = []
    for p in started:
        p.stop()
        log = p.log_path.read_text() if p.log_path.exists() else ""
        if "Traceback" in log:
            problems.append(f"kubelet plugin log of {p.node.name} has a traceback:\n{p.log_tail(80)}")
        subprocess.run(["rm", "-rf", str(p.base)], check=False)
    assert not problems, "\n".join(problems)


@pytest.fixture
def plugin(plugin_factory: Callable[..., PluginProcess], node: SimNode, raw: RawClient) -> Iterator[PluginProcess]:
    p = plugin_factory(node)
    yield p
    # Leave the node as we found it for the next test.
    try:
        raw.patch(NODES, node.name, {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: None}}})
    except ApiError:
        pass
