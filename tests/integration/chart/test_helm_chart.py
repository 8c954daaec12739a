"""The Helm chart: lint, render per mode, refuse invalid combinations, pass server-side dry-run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.checkout import CHART_DIR
from cdriver.dra.registration import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from tests.support.chart import NAMESPACE, by_kind, dry_run_render, objects, remove_device_classes, render

HOST_MODE = ["--set", "imex.mode=hostManaged", "--set", "featureGates.HostManagedIMEXDaemon=true"]


@pytest.fixture(scope="module")
def helm() -> Path:
    from cdriver.sim.controlplane.binaries import helm_binary

    return helm_binary(echo=False)


def test_helm_lint_is_clean(helm: Path) -> None:
    out = subprocess.run([str(helm), "lint", str(CHART_DIR), "--namespace", NAMESPACE], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_default_render_has_every_driver_managed_object(helm: Path) -> None:
    docs = objects(helm)
    classes = by_kind(docs, "DeviceClass")
    assert set(classes) == {constants.DEVICE_CLASS_DEFAULT_CHANNEL, constants.DEVICE_CLASS_DAEMON}
    expr = classes[constants.DEVICE_CLASS_DEFAULT_CHANNEL]["spec"]["selectors"][0]["cel"]["expression"]
    assert "type == 'channel'" in expr and ".id == 0" in expr
    assert set(by_kind(docs, "Deployment")) == {constants.CONTROLLER_DEPLOYMENT}
    plugin = by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["cdriver", "kubelet-plugin"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["IMEX_MODE"]["value"] == IMEX_MODE_DRIVER_MANAGED
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["plugins"]["mountPath"] == KUBELET_PLUGINS_DIR
    assert mounts["plugins-registry"]["mountPath"] == KUBELET_REGISTRY_DIR
    # Daemon pods run as the fixed service account the controller renders into DaemonSets.
    assert constants.DAEMON_SERVICE_ACCOUNT in by_kind(docs, "ServiceAccount")
    # Release-prefixed cluster-scoped names: two installs cannot collide.
    for name in by_kind(docs, "ClusterRole"):
        assert name.startswith("rel-cdriver-")


def test_feature_gates_render_sorted_with_trailing_comma(helm: Path) -> None:
    docs = objects(helm, "--set", "featureGates.ComputeDomainCliques=false",
                   "--set", "featureGates.IMEXDaemonsWithDNSNames=false")
    ctr = by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["FEATURE_GATES"] == "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false,"


def test_host_managed_render_drops_daemon_objects(helm: Path) -> None:
    docs = objects(helm, *HOST_MODE)
    assert set(by_kind(docs, "DeviceClass")) == {constants.DEVICE_CLASS_DEFAULT_CHANNEL}
    assert constants.DAEMON_SERVICE_ACCOUNT not in by_kind(docs, "ServiceAccount")
    ctr = by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["IMEX_MODE"] == IMEX_MODE_HOST_MANAGED
    assert env["IMEX_HOST_SOCKET_PATH"] == DEFAULT_HOST_IMEX_SOCKET


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "imex.mode=hostManaged"], "requires the alpha feature gate: set featureGates.HostManagedIMEXDaemon"),
        (["--set", "imex.isolation=channel"], "imex.isolation=channel is reserved"),
        (["--set", "imex.mode=elsewhere"], "imex.mode=\"elsewhere\" is not supported"),
        (["--set", "featureGates.IMEXDaemonsWithDNSNames=false"], "requires featureGates.ComputeDomainCliques=false"),
    ],
)
def test_invalid_combinations_fail_with_their_message(helm: Path, args: list[str], message: str) -> None:
    out = render(helm, *args)
    assert out.returncode != 0
    assert message in out.stderr


def test_install_into_default_namespace_is_refused(helm: Path) -> None:
    out = render(helm, namespace="default")
    assert out.returncode != 0
    assert "default namespace is not supported" in out.stderr


def test_client_rate_limits_render_with_the_roles_defaults_and_as_set(helm: Path) -> None:
    from cdriver.roles.controller import settings as controller_settings
    from cdriver.roles.kubelet_plugin import config as plugin_config

    def limits(*args: str) -> tuple:
        docs = objects(helm, *args)
        pods = (by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT],
                by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET])
        envs = [{e["name"]: e.get("value") for e in p["spec"]["template"]["spec"]["containers"][0]["env"]}
                for p in pods]
        return tuple((env["KUBE_API_QPS"], env["KUBE_API_BURST"]) for env in envs)

    assert limits() == (
        (f"{controller_settings.DEFAULT_KUBE_API_QPS:g}", str(controller_settings.DEFAULT_KUBE_API_BURST)),
        (f"{plugin_config.DEFAULT_KUBE_API_QPS:g}", str(plugin_config.DEFAULT_KUBE_API_BURST)))
    assert limits("--set", "controller.kubeApiQps=0.5", "--set", "controller.kubeApiBurst=3",
                  "--set", "kubeletPlugin.kubeApiQps=-1") == (("0.5", "3"), ("-1", "20"))
    out = render(helm, "--set", "kubeletPlugin.kubeApiBurst=-1")
    assert out.returncode != 0 and "kubeApiBurst" in out.stderr


def test_metrics_pods_are_annotated_for_prometheus_and_the_daemon_port_is_passed(helm: Path) -> None:
    def rendered(*args: str) -> tuple:
        docs = objects(helm, *args)
        pods = (by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT]["spec"]["template"],
                by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]["spec"]["template"])
        annotations = tuple((p["metadata"].get("annotations") or {}).get("prometheus.io/port") for p in pods)
        env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
        return annotations, env["DAEMON_METRICS_PORT"]

    assert rendered() == (("8080", "8081"), "8082")
    assert rendered("--set", "kubeletPlugin.metrics.enabled=false", "--set", "controller.daemon.metrics.port=0") \
        == (("8080", None), "0")
    assert rendered("--set", "metrics.podAnnotations.enabled=false") == ((None, None), "8082")
    out = render(helm, "--set", "controller.daemon.metrics.port=70000")
    assert out.returncode != 0 and "port" in out.stderr


@pytest.mark.parametrize("mode_args", [[], HOST_MODE], ids=["driverManaged", "hostManaged"])
def test_rendered_objects_pass_server_side_dry_run(helm: Path, raw, mode_args: list[str]) -> None:
    dry_run_render(helm, raw, *mode_args)


def test_install_upgrade_uninstall_leaves_no_orphans(helm: Path, cluster, raw) -> None:
    """helm install → upgrade → uninstall on the real API server: only the CRDs stay."""
    from cdriver.kube.resources import RESOURCES

    release, ns = "lifecycle", "helm-lifecycle"
    base = [str(helm), "--kubeconfig", str(cluster.kubeconfig), "--namespace", ns]

    def helm_run(*args: str) -> None:
        out = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr

    kinds = ["deployments", "daemonsets", "serviceaccounts", "roles", "rolebindings", "clusterroles",
             "clusterrolebindings", "deviceclasses"]

    def owned() -> dict[str, list[str]]:
        sel = f"app.kubernetes.io/instance={release}"
        found = {}
        for kind in kinds:
            res = RESOURCES[kind]
            items = raw.list(res, namespace=ns if res.namespaced else None, label_selector=sel)["items"]
            found[kind] = sorted(i["metadata"]["name"] for i in items)
        return found

    remove_device_classes(raw)
    helm_run("install", release, str(CHART_DIR), "--create-namespace")
    installed = owned()
    assert installed["deployments"] == [constants.CONTROLLER_DEPLOYMENT]
    assert installed["daemonsets"] == [constants.KUBELET_PLUGIN_DAEMONSET]
    assert set(installed["deviceclasses"]) == {constants.DEVICE_CLASS_DEFAULT_CHANNEL, constants.DEVICE_CLASS_DAEMON}
    crd_names = {"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"}

    # Upgrading to host-managed mode removes the daemon-only objects.
    helm_run("upgrade", release, str(CHART_DIR), *HOST_MODE)
    upgraded = owned()
    assert upgraded["deviceclasses"] == [constants.DEVICE_CLASS_DEFAULT_CHANNEL]
    assert constants.DAEMON_SERVICE_ACCOUNT not in upgraded["serviceaccounts"]

    helm_run("uninstall", release, "--wait", "--timeout", "60s")
    assert owned() == {kind: [] for kind in kinds}
    crds = {i["metadata"]["name"] for i in raw.list(RESOURCES["customresourcedefinitions"])["items"]}
    assert crd_names <= crds, "Helm keeps CRDs on uninstall"


def test_locally_built_image_is_used_by_every_pod_and_the_daemons(helm: Path) -> None:
    """Real nodes load `cdriver sim images` archives; only the repository needs setting to use them."""
    from cdriver.sim.images.refs import REGISTRY, image_ref

    ref = image_ref("cdriver")
    docs = objects(helm, "--set", f"image.repository={REGISTRY}/cdriver", "--set", "image.pullPolicy=Never")
    controller = by_kind(docs, "Deployment")[constants.CONTROLLER_DEPLOYMENT]["spec"]["template"]["spec"]
    plugin = by_kind(docs, "DaemonSet")[constants.KUBELET_PLUGIN_DAEMONSET]["spec"]["template"]["spec"]
    containers = controller["containers"] + plugin["containers"] + plugin.get("initContainers", [])
    assert len(containers) >= 3
    assert {(c["image"], c["imagePullPolicy"]) for c in containers} == {(ref, "Never")}
    env = {e["name"]: e.get("value") for e in controller["containers"][0]["env"]}
    assert env["IMAGE_NAME"] == ref, "the controller hands the same image to the IMEX daemon DaemonSets"
