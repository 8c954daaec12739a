"""What upstream's users select the driver by is there under cdriver's chart: upstream's
component label on the pods (cdriver's own labels beside it), upstream's container, Deployment,
DaemonSet and leader Lease names, and upstream's selectors, so that a switch between the charts
updates the Deployment and DaemonSet in place; `gpuResourcesEnabledOverride` is accepted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from cdriver.api import constants
from cdriver.checkout import CHART_DIR
from tests.support.chart import KUBE_VERSION, NAMESPACE, by_kind, objects, render, upstream_chart

#: what upstream's own test suite passes to every install (tests/bats/helpers.sh)
UPSTREAM_INSTALL = ["--set", "gpuResourcesEnabledOverride=true", "--set", "nvidiaDriverRoot=/run/nvidia/driver"]


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


def env_of(container: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container["env"]}


def workloads(docs: list[dict]) -> tuple[dict, dict]:
    (deployment,) = by_kind(docs, "Deployment").values()
    (daemonset,) = by_kind(docs, "DaemonSet").values()
    return deployment, daemonset


def test_pods_objects_and_lease_carry_upstreams_names(helm: Path) -> None:
    docs = objects(helm)
    deployment, daemonset = workloads(docs)
    assert deployment["metadata"]["name"] == constants.CONTROLLER_DEPLOYMENT == "dra-driver-nvidia-gpu-controller"
    assert daemonset["metadata"]["name"] == constants.KUBELET_PLUGIN_DAEMONSET
    for obj, component in ((deployment, "controller"), (daemonset, "kubelet-plugin")):
        assert obj["spec"]["selector"] == {"matchLabels": {"dra-driver-nvidia-gpu-component": component}}
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert labels["dra-driver-nvidia-gpu-component"] == component
        # cdriver's own labels stay beside upstream's
        assert labels["app.kubernetes.io/component"] == component
        assert labels["app.kubernetes.io/name"] == "cdriver"
        assert labels["app.kubernetes.io/instance"] == "rel"
    controller = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in controller] == [constants.CONTAINER_CONTROLLER] == ["compute-domain"]
    assert env_of(controller[0])["LEADER_ELECTION_LEASE_LOCK_NAME"] == constants.CONTROLLER_DEPLOYMENT
    assert [c["name"] for c in daemonset["spec"]["template"]["spec"]["containers"]] == ["compute-domains"]
    # the metrics Service still finds the controller's pods
    with_service = objects(helm, "--set", "metrics.service.enabled=true")
    service = by_kind(with_service, "Service")["rel-cdriver-controller-metrics"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_name_override_renames_as_upstreams_chart_does(helm: Path) -> None:
    deployment, daemonset = workloads(objects(helm, "--set", "nameOverride=gpu-dra"))
    assert deployment["metadata"]["name"] == "gpu-dra-controller"
    assert daemonset["metadata"]["name"] == "gpu-dra-kubelet-plugin"
    assert deployment["spec"]["selector"] == {"matchLabels": {"gpu-dra-component": "controller"}}
    assert env_of(deployment["spec"]["template"]["spec"]["containers"][0])[
        "LEADER_ELECTION_LEASE_LOCK_NAME"] == "gpu-dra-controller"


def upstream_render(helm: Path, chart: Path, *args: str) -> list[dict]:
    out = subprocess.run([str(helm), "template", "dra-driver-nvidia-gpu-batssuite", str(chart), "--namespace",
                          NAMESPACE, "--kube-version", KUBE_VERSION, "--api-versions", "resource.k8s.io/v1",
                          *UPSTREAM_INSTALL, "--set", "resources.gpus.enabled=false", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("args", [[], ["--set", "nameOverride=gpu-dra"]], ids=["default", "nameOverride"])
def test_names_and_selectors_are_upstream_charts(helm: Path, tmp_path: Path, args: list[str]) -> None:
    """Rendered side by side with upstream's own chart (same release, namespace and values)."""
    theirs = workloads(upstream_render(helm, upstream_chart(tmp_path), *args))
    out = subprocess.run([str(helm), "template", "dra-driver-nvidia-gpu-batssuite", str(CHART_DIR), "--namespace",
                          NAMESPACE, "--kube-version", KUBE_VERSION, *UPSTREAM_INSTALL, *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ours = workloads([d for d in yaml.safe_load_all(out.stdout) if d])
    for up, mine in zip(theirs, ours, strict=True):
        assert mine["metadata"]["name"] == up["metadata"]["name"]
        assert mine["spec"]["selector"] == up["spec"]["selector"]
        assert up["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == \
            mine["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"]
        assert up["spec"]["selector"]["matchLabels"].items() <= mine["spec"]["template"]["metadata"]["labels"].items()
        assert [c["name"] for c in mine["spec"]["template"]["spec"]["containers"]] == [
            c["name"] for c in up["spec"]["template"]["spec"]["containers"]]
    lease = [env_of(obj["spec"]["template"]["spec"]["containers"][0])["LEADER_ELECTION_LEASE_LOCK_NAME"]
             for obj in (theirs[0], ours[0])]
    assert lease[0] == lease[1]


def test_gpu_resources_enabled_override_is_accepted_and_changes_nothing(helm: Path) -> None:
    """Upstream's meaning: an acknowledgement its chart asks for before it deploys its GPU half.
    cdriver has none, so the acknowledgement installs the same objects, and the GPU half stays
    refused with or without it."""
    assert objects(helm, *UPSTREAM_INSTALL) == objects(helm, "--set", "nvidiaDriverRoot=/run/nvidia/driver")
    out = render(helm, "--set", "gpuResourcesEnabledOverride=true", "--set", "resources.gpus.enabled=true")
    assert out.returncode != 0
    assert "resources.gpus.enabled=true is not supported by cdriver" in out.stderr
    out = render(helm, "--set", "gpuResourcesEnabledOverride=yes")
    assert out.returncode != 0 and "gpuResourcesEnabledOverride" in out.stderr
