"""Session fixtures: one real local control plane per test session.

- `cluster`: a started `cdriver.sim.controlplane.cluster.LocalCluster` (etcd + kube-apiserver +
  kube-controller-manager + kube-scheduler). Its run directory (logs, PKI, etcd data) is
  removed after a passing session and kept under pytest's temporary directory otherwise.
- `raw`: an admin `RawClient` for it.
- `namespace`: a fresh namespace per test (its default service account exists).

Before every test that uses the cluster, a component that has exited (a test may crash
kube-apiserver on purpose) is restarted; if that fails the test errors with the component's
log tail. The binaries are built (or found in the cache) once after collection, outside the
per-test timeout; a failed build makes every cluster test error with the build's output.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cdriver.checkout import CHART_DIR, CRD_DIR
from tests.support.kinds import TEST_KINDS, unmarked

CLUSTER_FIXTURES = {"cluster", "raw", "namespace"}
_BUILD: dict[str, Any] = {}


def _needs_cluster(item: pytest.Item) -> bool:
    return bool(CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test has a kind (its folder's), so `make unit`, `make integration` and `make e2e` cover all."""
    missing = unmarked(items)
    if missing:
        raise pytest.UsageError(
            f"{len(missing)} test(s) carry none of the markers {', '.join(TEST_KINDS)}, e.g. {missing[0]}; "
            "put the test file under its kind's folder (tests/unit, tests/integration, tests/e2e, "
            "tests/packaging, tests/reliability), whose conftest.py marks it")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build or locate the control-plane binaries if a selected test needs the cluster."""
    if session.config.option.collectonly or not any(_needs_cluster(i) for i in session.items):
        return
    from cdriver.errors import CdriverError
    from cdriver.sim.controlplane.binaries import control_plane_binaries

    capture = session.config.pluginmanager.getplugin("capturemanager")
    show = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with show:  # a cold build takes many minutes: let its progress lines through
        try:
            _BUILD["binaries"] = control_plane_binaries()
        except CdriverError as exc:
            _BUILD["error"] = str(exc)


@pytest.fixture(scope="session", autouse=True)
def _kubectl_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """kubectl keeps its discovery cache with the test run's files, not in ~/.kube/cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECACHEDIR", str(tmp_path_factory.mktemp("kubectl-cache")))
        yield


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from cdriver.errors import CdriverError
    from cdriver.sim.controlplane.binaries import control_plane_binaries
    from cdriver.sim.controlplane.cluster import LocalCluster

    if "error" in _BUILD:
        pytest.fail(f"the local control plane could not be built:\n{_BUILD['error']}", pytrace=False)
    try:
        binaries = _BUILD.get("binaries") or control_plane_binaries()
    except CdriverError as exc:
        pytest.fail(f"the local control plane could not be built:\n{exc}", pytrace=False)
    run_dir = tmp_path_factory.mktemp("control-plane") / "run"
    local = LocalCluster(run_dir=run_dir, binaries=binaries)
    try:
        local.start()
    except CdriverError as exc:
        pytest.fail(f"the local control plane did not start:\n{exc}", pytrace=False)
    yield local
    local.keep = request.session.testsfailed > 0
    local.stop()
    if local.keep:
        print(f"\ncontrol-plane run directory kept for inspection: {run_dir}")


@pytest.fixture(autouse=True)
def _control_plane_healthy(request: pytest.FixtureRequest) -> None:
    """Bring back any component a previous test killed, or fail with its log tail."""
    if not _needs_cluster(request.node):
        return
    from cdriver.sim.controlplane.cluster import ClusterError

    local = request.getfixturevalue("cluster")
    try:
        restarted = local.ensure_healthy()
    except ClusterError as exc:
        pytest.fail(f"the local control plane is broken and could not be restarted:\n{exc}",
                    pytrace=False)
    if restarted:
        print(f"restarted exited control-plane components: {', '.join(restarted)}")


@pytest.fixture(scope="session")
def raw(cluster: Any) -> Any:
    return cluster.raw


@pytest.fixture
def namespace(cluster: Any, raw: Any) -> Iterator[str]:
    """A fresh namespace; its pods are force-deleted and the namespace removed afterwards."""
    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.create_namespace(name)
    yield name
    try:
        # Pods bound to kubelet-less nodes would wait for a kubelet forever: force-delete.
        for pod in raw.list(RESOURCES["pods"], name)["items"]:
            raw.delete(RESOURCES["pods"], pod["metadata"]["name"], name, grace_period_seconds=0)
        raw.delete(RESOURCES["namespaces"], name)
    except ApiError as exc:
        if not exc.not_found and not exc.unavailable:
            raise


@pytest.fixture(scope="session")
def chart_crds(cluster: Any) -> None:
    """The chart's CRDs (ComputeDomain, ComputeDomainClique) installed and served."""
    import time

    import yaml

    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    raw = cluster.raw
    crd_res = RESOURCES["customresourcedefinitions"]
    crd_dir = CRD_DIR
    for path in sorted(crd_dir.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        try:
            raw.create(crd_res, body)
        except ApiError as exc:
            if not exc.already_exists:
                raise
            current = raw.get(crd_res, body["metadata"]["name"])
            current["spec"] = body["spec"]
            raw.update(crd_res, current)
    deadline = time.monotonic() + 30
    for plural in ("computedomains", "computedomaincliques"):
        while True:
            try:
                raw.list(RESOURCES[plural], "default")
                break
            except ApiError as exc:
                if not exc.not_found or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def chart_device_classes() -> list[dict]:
    """The chart's DeviceClasses (driver-managed rendering), as the API objects."""
    import subprocess

    import yaml

    from cdriver.sim.controlplane.binaries import helm_binary

    chart = CHART_DIR
    out = subprocess.run([str(helm_binary(echo=False)), "template", "t", str(chart), "--namespace", "cdriver-system",
                          "--kube-version", "1.37.2", "-s", "templates/deviceclasses.yaml"],
                         capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture
def device_classes(cluster: Any) -> None:
    """The chart's DeviceClasses exist (created if a previous test removed them)."""
    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    for body in chart_device_classes():
        try:
            cluster.raw.create(RESOURCES["deviceclasses"], body)
        except ApiError as exc:
            if not exc.already_exists:
                raise
