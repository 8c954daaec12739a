"""`cdriver crds apply`: install or upgrade cdriver's CustomResourceDefinitions.

Helm installs a chart's ``crds/`` once and never upgrades them, so a cluster that ran the
upstream driver (or an older cdriver) keeps its old ComputeDomain CRD after ``helm upgrade``.
This command server-side applies the chart's CRDs (forcing cdriver's field manager over
Helm's or kubectl's), waits until each is established and says what changed. The chart runs it
in an optional pre-install/pre-upgrade hook Job (``crds.upgradeJob.enabled``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from pathlib import Path

import click
import yaml

from cdriver.checkout import CRD_DIR
from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES

CRD_GROUP = "resource.nvidia.com"
FIELD_MANAGER = "cdriver-crds"
ESTABLISH_TIMEOUT = 30.0
CRDS = RESOURCES["customresourcedefinitions"]


def default_crd_dir() -> Path:
    """The chart's crds/ directory of the source tree this package runs from."""
    return CRD_DIR


def load_crds(paths: Iterable[Path]) -> list[dict]:
    """CRD documents from YAML files or directories of them, validated to be cdriver's."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        elif path.is_file():
            files.append(path)
        else:
            raise CdriverError(f"CRD source {path} does not exist: pass the chart's crds/ directory with -f")
    crds: list[dict] = []
    for file in files:
        try:
            docs = [d for d in yaml.safe_load_all(file.read_text()) if d]
        except (OSError, yaml.YAMLError) as exc:
            raise CdriverError(f"cannot read CRDs from {file}: {exc}") from None
        for doc in docs:
            kind, group = doc.get("kind"), (doc.get("spec") or {}).get("group")
            if kind != "CustomResourceDefinition" or group != CRD_GROUP:
                raise CdriverError(f"{file}: {kind or 'a document without kind'} of group {group!r} is not one "
                                   f"of cdriver's CRDs (kind CustomResourceDefinition, group {CRD_GROUP}); "
                                   "pass only the chart's crds/ files")
            crds.append(doc)
    if not crds:
        raise CdriverError(f"no CRDs found in {', '.join(map(str, paths))}: pass the chart's crds/ directory")
    return crds


def apply_crd(raw: RawClient, crd: dict) -> str:
    """Server-side apply one CRD; returns "created", "updated" or "unchanged"."""
    name = crd["metadata"]["name"]
    before = raw.get_or_none(CRDS, name)
    after = raw.patch(CRDS, name, crd, patch_type="apply", field_manager=FIELD_MANAGER, force=True)
    if before is None:
        return "created"
    return "unchanged" if before["metadata"].get("resourceVersion") == after["metadata"].get("resourceVersion") \
        else "updated"


def wait_established(raw: RawClient, name: str, timeout: float = ESTABLISH_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        conditions = (raw.get(CRDS, name).get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise CdriverError(f"CRD {name} was applied but is not Established after {timeout:.0f}s: "
                               f"check its conditions with kubectl get crd {name} -o yaml")
        time.sleep(0.2)


@click.group("crds")
def command() -> None:
    """Install or upgrade cdriver's CRDs (Helm never upgrades a chart's crds/)."""


@command.command("apply")
@click.option("-f", "--filename", "paths", multiple=True, type=click.Path(path_type=Path),
              help="CRD file or directory (repeatable); default: the chart's crds/ of this source tree.")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None,
              help="Kubeconfig file (default: in-cluster config, env KUBECONFIG).")
def apply(paths: tuple[Path, ...], kubeconfig: str | None) -> None:
    """Server-side apply the CRDs and wait until they are established."""
    from cdriver.kube.client import load_api_client

    try:
        crds = load_crds(paths or (default_crd_dir(),))
        raw = RawClient(load_api_client(kubeconfig))
        for crd in crds:
            name = crd["metadata"]["name"]
            outcome = apply_crd(raw, crd)
            wait_established(raw, name)
            click.echo(f"customresourcedefinition {name} {outcome}")
    except ApiError as exc:
        click.echo(f"error: applying cdriver's CRDs failed: {exc}", err=True)
        sys.exit(1)
    except CdriverError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
