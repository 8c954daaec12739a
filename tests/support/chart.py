"""The chart rendered with the pinned helm: `helm template` output, its objects by kind, a
server-side dry run of every rendered object, and the cluster-wide DeviceClasses cleared."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from cdriver.api import constants
from cdriver.checkout import CHART_DIR

NAMESPACE = "cdriver-system"
KUBE_VERSION = "1.37.2"


def render(helm: Path, *args: str, namespace: str = NAMESPACE) -> subprocess.CompletedProcess:
    """`helm template` of the chart (release `rel`) with `args`."""
    return subprocess.run([str(helm), "template", "rel", str(CHART_DIR), "--namespace", namespace,
                           "--kube-version", KUBE_VERSION, *args],
                          capture_output=True, text=True, timeout=60)


def objects(helm: Path, *args: str) -> list[dict]:
    """The rendered objects (the render must succeed)."""
    out = render(helm, *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    """The objects of `kind`, by name."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def remove_device_classes(raw) -> None:
    """DeviceClasses have fixed cluster-wide names: remove ones other tests created without Helm."""
    from cdriver.kube.resources import RESOURCES

    for name in (constants.DEVICE_CLASS_DEFAULT_CHANNEL, constants.DEVICE_CLASS_DAEMON):
        if raw.get_or_none(RESOURCES["deviceclasses"], name):
            raw.delete(RESOURCES["deviceclasses"], name)


def dry_run_render(helm: Path, raw, *args: str) -> None:
    """Create every rendered object with a server-side dry run (the API server validates it)."""
    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    try:
        raw.create(RESOURCES["namespaces"], {"metadata": {"name": NAMESPACE}})
    except ApiError as e:
        if not e.already_exists:
            raise
    remove_device_classes(raw)
    by_kind_resource = {res.kind: res for res in RESOURCES.values()}
    for doc in objects(helm, *args):
        res = by_kind_resource[doc["kind"]]
        ns = NAMESPACE if res.namespaced else None
        raw.create(res, doc, namespace=ns, dry_run=True)


def upstream_chart(dest: Path) -> Path:
    """Upstream's chart, extracted from its source tarball into `dest` (skips without it)."""
    from cdriver.sim.world.upstream_driver import PEER_CHART_SUBDIR, PeerSourceMissing, find_source_tarball
    from tests.support.upstream_inputs import skip_without_upstream

    try:
        tarball = find_source_tarball()
    except PeerSourceMissing as exc:  # an input this repository cannot carry (upstream's code)
        skip_without_upstream(f"upstream's chart is not here: {exc}")
    out = subprocess.run(["tar", "-xJf", str(tarball), "-C", str(dest), "--wildcards", f"*/{PEER_CHART_SUBDIR}/*"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"extracting upstream's chart from {tarball}: {out.stderr}"
    (chart,) = dest.glob(f"*/{PEER_CHART_SUBDIR}")
    return chart
