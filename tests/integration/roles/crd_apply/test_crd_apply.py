"""`cdriver crds apply` and the chart's CRD upgrade hook: Helm never upgrades crds/, so an older
ComputeDomain CRD (the upstream driver's, without cdriver's status fields) is replaced by these."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import yaml

from cdriver.api.resources import COMPUTE_DOMAINS
from cdriver.checkout import CHART_DIR
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES, Resource
from cdriver.sim.world.scenario import compute_domain
from tests.support.waiting import wait_for

CRD_DIR = CHART_DIR / "crds"
CRDS = RESOURCES["customresourcedefinitions"]
CD_CRD = "computedomains.resource.nvidia.com"
CDRIVER_ONLY_STATUS = ("readyNodes", "conditions")


def crds_apply(cluster: Any, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdriver", "crds", "apply", "--kubeconfig", str(cluster.kubeconfig),
                           *args], capture_output=True, text=True, timeout=120)


def status_properties(crd: dict) -> dict:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]


def install_older_crd(raw: RawClient) -> None:
    """The ComputeDomain CRD as the upstream driver ships it: no readyNodes, no conditions."""
    current = raw.get(CRDS, CD_CRD)
    older = copy.deepcopy(current)
    for field in CDRIVER_ONLY_STATUS:
        status_properties(older).pop(field, None)
    raw.update(CRDS, older)


def test_apply_upgrades_an_older_crd_so_status_fields_are_kept(cluster: Any, raw: RawClient, namespace: str,
                                                               chart_crds: None) -> None:
    install_older_crd(raw)
    assert not set(CDRIVER_ONLY_STATUS) & set(status_properties(raw.get(CRDS, CD_CRD)))

    out = crds_apply(cluster, "-f", str(CRD_DIR))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"customresourcedefinition {CD_CRD} updated" in out.stdout.splitlines()
    chart_crd = yaml.safe_load((CRD_DIR / "resource.nvidia.com_computedomains.yaml").read_text())
    assert status_properties(raw.get(CRDS, CD_CRD)) == status_properties(chart_crd)

    # What the controller writes into status now stays.
    cd = raw.create(COMPUTE_DOMAINS, compute_domain(f"cd-{uuid.uuid4().hex[:6]}", namespace, "t", mode=None), namespace)
    cd["status"] = {"status": "NotReady", "readyNodes": "0/2"}
    stored = raw.update_status(COMPUTE_DOMAINS, cd, namespace)
    assert stored["status"]["readyNodes"] == "0/2"

    again = crds_apply(cluster, "-f", str(CRD_DIR))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"customresourcedefinition {CD_CRD} unchanged" in again.stdout.splitlines()


def test_apply_refuses_files_that_are_not_cdrivers_crds(cluster: Any, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                                     "metadata": {"name": "widgets.example.com"},
                                     "spec": {"group": "example.com"}}))
    out = crds_apply(cluster, "-f", str(other))
    assert out.returncode == 2
    assert f"{other}: CustomResourceDefinition of group 'example.com' is not one of cdriver's CRDs" in out.stderr
    assert raw_absent(cluster.raw, "widgets.example.com")

    missing = crds_apply(cluster, "-f", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist: pass the chart's crds/ directory with -f" in missing.stderr


def raw_absent(raw: RawClient, name: str) -> bool:
    return raw.get_or_none(CRDS, name) is None


def test_chart_hook_applies_exactly_the_charts_crds() -> None:
    from cdriver.sim.controlplane.binaries import helm_binary

    def render(*args: str) -> list[dict]:
        out = subprocess.run([str(helm_binary(echo=False)), "template", "rel", str(CHART_DIR), "-n", "cdriver-system",
                              *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    assert not [d for d in render() if d["metadata"]["name"] == "rel-cdriver-crds"], "off by default"
    hooks = {d["kind"]: d for d in render("--set", "crds.upgradeJob.enabled=true")
             if d["metadata"]["name"] == "rel-cdriver-crds"}
    assert set(hooks) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job"}
    for obj in hooks.values():
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    files = {p.name: yaml.safe_load(p.read_text()) for p in CRD_DIR.glob("*.yaml")}
    assert {k: yaml.safe_load(v) for k, v in hooks["ConfigMap"]["data"].items()} == files
    pod = hooks["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rel-cdriver-crds"
    assert pod["containers"][0]["command"] == ["cdriver", "crds", "apply", "-f", "/crds"]
    assert pod["volumes"][0]["configMap"]["name"] == "rel-cdriver-crds"


JOBS = Resource("batch", "v1", "jobs", True, "Job")


def test_upgrade_hook_job_replaces_older_crds_on_a_node(cluster: Any, raw: RawClient, chart_crds: None) -> None:
    """`helm upgrade --set crds.upgradeJob.enabled=true` over a release whose CRDs are the
    upstream driver's: the hook Job runs `cdriver crds apply` on a node, the CRDs gain cdriver's
    status fields, the release is upgraded and the hook's objects are gone afterwards."""
    from cdriver.roles.crd_apply import FIELD_MANAGER
    from cdriver.sim.controlplane.binaries import helm_binary
    from cdriver.sim.node.simulated.agent import start_nodes
    from cdriver.sim.node.simulated.runtime import NodeOptions
    from tests.support.chart import remove_device_classes

    release, ns, pool = "crdhook", "crd-hook", f"crdhook-{uuid.uuid4().hex[:4]}"
    hook = f"{release}-cdriver-crds"
    helm = [str(helm_binary(echo=False)), "--kubeconfig", str(cluster.kubeconfig), "--namespace", ns]
    # No controller pod: only the hook's pod runs, on the node started for it.
    values = ["--set", "controller.replicas=0"]

    def helm_run(*args: str) -> str:
        out = subprocess.run([*helm, *args], capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    remove_device_classes(raw)
    install_older_crd(raw)
    helm_run("install", release, str(CHART_DIR), "--create-namespace", *values)
    base = tempfile.mkdtemp(prefix="crh-")
    (node,) = start_nodes(raw, 1, base, prefix=pool, labels={"crd-hook": pool}, options=NodeOptions.fast(),
                          pki_dir=cluster.pki.dir)
    job_events: list[tuple[str, dict]] = []
    watch = raw.watch(JOBS, ns, field_selector=f"metadata.name={hook}", timeout_seconds=180)
    watcher = threading.Thread(target=lambda: job_events.extend(watch), daemon=True)
    watcher.start()
    try:
        helm_run("upgrade", release, str(CHART_DIR), *values, "--set", "crds.upgradeJob.enabled=true",
                 "--set-json", f'crds.upgradeJob.nodeSelector={{"crd-hook": "{pool}"}}', "--timeout", "120s")

        # The Job completed (on the node), then Helm deleted it: hook-succeeded.
        wait_for("the hook Job to be deleted", lambda: any(kind == "DELETED" for kind, _ in job_events), 30)
        finished = [(job.get("status") or {}).get("succeeded") for kind, job in job_events if kind == "MODIFIED"]
        assert 1 in finished, job_events
        chart_crd = yaml.safe_load((CRD_DIR / "resource.nvidia.com_computedomains.yaml").read_text())
        crd = raw.get(CRDS, CD_CRD)
        assert status_properties(crd) == status_properties(chart_crd)
        assert FIELD_MANAGER in {m["manager"] for m in crd["metadata"]["managedFields"]}, "applied by the Job"

        status = json.loads(helm_run("status", release, "-o", "json"))
        assert (status["version"], status["info"]["status"]) == (2, "deployed")
        for kind in ("serviceaccounts", "configmaps"):
            assert raw.get_or_none(RESOURCES[kind], hook, ns) is None, kind
        for kind in ("clusterroles", "clusterrolebindings"):
            assert raw.get_or_none(RESOURCES[kind], hook) is None, kind
        wait_for("the hook Job's pod to be removed with it",
                 lambda: not raw.list(RESOURCES["pods"], ns, label_selector=f"job-name={hook}")["items"], 30)
    finally:
        watch.close()
        subprocess.run([*helm, "uninstall", release, "--wait", "--timeout", "60s"], capture_output=True, timeout=90)
        node.stop(delete_node=True)
        shutil.rmtree(base, ignore_errors=True)
