"""cdriver on the oldest Kubernetes minors it supports.

A real Kubernetes 1.33 control plane (built like the default one) with dynamic resource
allocation turned on (beta, off by default there). It first serves resource.k8s.io/v1beta1
only, as 1.32 does: the chart installs with v1beta1 DeviceClasses and its admission policy
reads v1beta1 claims; the controller writes claim templates, the plugin publishes its
ResourceSlice and prepares a claim that the 1.33 scheduler allocated from it. Then the API
server is restarted serving v1beta2 too, as 1.33 is set up for DRA (its own scheduler and node
authorizer read v1beta1, so a 1.33 API server without v1beta1 never gets ready): cdriver must
speak v1beta2 there, whose shapes differ from v1beta1's (no ``basic`` device wrapper; single-class
requests nested under ``exactly``), and the same flow runs again.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdriver.api import constants
from cdriver.checkout import CHART_DIR
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from tests.support.kubelet import Kubelet
from tests.support.objects import make_cd, node_label, set_clique_ready, uid_of
from tests.support.plugin_process import PluginProcess, sim_node
from tests.support.waiting import wait_for

BETA = "/apis/resource.k8s.io/v1beta1"
ONLY_V1BETA1 = ("v1beta1",)
BOTH_BETAS = ("v1beta1", "v1beta2")
RELEASE, RELEASE_NS = "old", "cdriver-system"
TEMPLATES, CLAIMS, PODS = RESOURCES["resourceclaimtemplates"], RESOURCES["resourceclaims"], RESOURCES["pods"]


@pytest.fixture(scope="module")
def old_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from cdriver.errors import CdriverError
    from cdriver.sim.controlplane.binaries import KUBE_OLDEST, control_plane_binaries
    from cdriver.sim.controlplane.cluster import LocalCluster, dra_beta_args

    try:
        binaries = control_plane_binaries(echo=False, kube=KUBE_OLDEST)
    except CdriverError as exc:
        pytest.fail(f"the Kubernetes 1.33 control plane could not be built:\n{exc}", pytrace=False)
    local = LocalCluster(run_dir=tmp_path_factory.mktemp("kube-1.33") / "run", binaries=binaries,
                         extra_args=dra_beta_args(ONLY_V1BETA1))
    local.start()
    yield local
    local.stop()


def serve(cluster: Any, versions: tuple[str, ...]) -> RawClient:
    """The API server serving the resource.k8s.io `versions` (restarted if it serves others),
    and a new client for it (a client picks its version once)."""
    from cdriver.sim.controlplane.cluster import APISERVER, dra_beta_args

    wanted = dra_beta_args(versions)[APISERVER]
    if cluster.extra_args[APISERVER] != wanted:
        cluster.restart_with(APISERVER, wanted)
    return RawClient(cluster.api_client())


@pytest.fixture(scope="module")
def old_raw(old_cluster: Any) -> RawClient:
    return serve(old_cluster, ONLY_V1BETA1)


def helm(cluster: Any, *args: str) -> str:
    """Run helm against the 1.33 cluster in the release's namespace; it must succeed (its output)."""
    from cdriver.sim.controlplane.binaries import helm_binary

    out = subprocess.run([str(helm_binary(echo=False)), "--kubeconfig", str(cluster.kubeconfig),
                          "--namespace", RELEASE_NS, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def release_ns(old_cluster: Any) -> str:
    """The chart installed with `helm install` against the 1.33 API server."""
    helm(old_cluster, "install", RELEASE, str(CHART_DIR), "--create-namespace")
    return RELEASE_NS


@pytest.fixture
def workload_ns(old_cluster: Any, old_raw: RawClient) -> Iterator[str]:
    name = f"w-{uuid.uuid4().hex[:8]}"
    old_cluster.create_namespace(name)
    yield name
    for pod in old_raw.list(PODS, name)["items"]:
        old_raw.delete(PODS, pod["metadata"]["name"], name, grace_period_seconds=0)


def test_server_serves_only_v1beta1(old_cluster: Any) -> None:
    raw = serve(old_cluster, ONLY_V1BETA1)
    assert raw.served_version() == "v1beta1"
    with pytest.raises(ApiError) as err:
        raw.request("GET", "/apis/resource.k8s.io/v1/deviceclasses")
    assert err.value.not_found


def test_chart_installs_beta_device_classes_and_its_policy_reads_beta_claims(
        old_raw: RawClient, release_ns: str, workload_ns: str) -> None:
    for name in (constants.DEVICE_CLASS_DEFAULT_CHANNEL, constants.DEVICE_CLASS_DAEMON):
        cls = old_raw.request("GET", f"{BETA}/deviceclasses/{name}")
        assert cls["apiVersion"] == "resource.k8s.io/v1beta1"
        assert f"'{constants.DRIVER_NAME}'" in cls["spec"]["selectors"][0]["cel"]["expression"]
        # ... and cdriver's own client reads them as v1 objects.
        assert old_raw.get(RESOURCES["deviceclasses"], name)["apiVersion"] == "resource.k8s.io/v1"

    # The daemon device class is reserved for the driver namespace, in the v1beta1 shape too.
    message = wait_for("the admission policy to refuse a v1beta1 claim for the daemon class",
                       lambda: daemon_claim_refusal(old_raw, "v1beta1", workload_ns), 20)
    assert "is reserved for the IMEX daemons" in message


def daemon_claim_refusal(raw: RawClient, version: str, namespace: str) -> str:
    """Why the API server refused a `version` claim for the IMEX daemons' class ("" if it did not)."""
    body = {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaim",
            "metadata": {"name": f"steal-{uuid.uuid4().hex[:5]}"},
            "spec": {"devices": {"requests": [wire_request(version, constants.DEVICE_CLASS_DAEMON)]}}}
    try:
        raw.request("POST", f"/apis/resource.k8s.io/{version}/namespaces/{namespace}/resourceclaims", body=body)
    except ApiError as exc:
        return exc.message if exc.status in (403, 422) else ""
    return ""


def wire_request(version: str, device_class: str, domain_uid: str = "") -> dict:
    """A single-class claim request as `version` has it on the wire (with a domain's channel
    selector when `domain_uid` is given)."""
    exactly: dict = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    if domain_uid:
        exactly["selectors"] = [{"cel": {"expression": constants.channel_domain_selector(domain_uid)}}]
    if version == "v1beta1":
        return {"name": "channel", **exactly}
    return {"name": "channel", "exactly": exactly}


def wire_device(version: str, name: str, attributes: dict) -> dict:
    """A ResourceSlice device as `version` has it on the wire."""
    return {"name": name, "basic": {"attributes": attributes}} if version == "v1beta1" \
        else {"name": name, "attributes": attributes}


def written_in(obj: dict) -> set[str]:
    """The API versions its writers used (the server records one per field manager)."""
    return {m["apiVersion"] for m in obj["metadata"]["managedFields"]}


@pytest.mark.parametrize("served", [ONLY_V1BETA1, BOTH_BETAS], ids=["v1beta1", "v1beta1+v1beta2"])
def test_controller_and_plugin_work_against_1_33(old_cluster: Any, release_ns: str, workload_ns: str,
                                                  tmp_path: Path, served: tuple[str, ...]) -> None:
    raw = serve(old_cluster, served)
    version = served[-1]
    assert raw.served_version() == version, "the newest beta the server serves"
    api = f"/apis/resource.k8s.io/{version}"
    controller_log = tmp_path / "controller.log"
    with open(controller_log, "ab") as log:
        controller = subprocess.Popen(
            [sys.executable, "-m", "cdriver", "-v", "4", "controller", "--kubeconfig", str(old_cluster.kubeconfig),
             "--namespace", release_ns, "--daemon-image", "cdriver:test"], stdout=log, stderr=subprocess.STDOUT)
    base = Path(f"/tmp/kpo-{uuid.uuid4().hex[:6]}")
    base.mkdir()
    sim = sim_node(raw, base, fabric=True)
    # binding conditions asked for: 1.33 serves none, so the plugin works as without the gate
    plugin = PluginProcess(sim, Path(old_cluster.kubeconfig), release_ns, base / "plugin",
                           gates="ComputeDomainBindingConditions=true")
    plugin.base.mkdir()
    try:
        # The controller writes the workload's claim template in the served version's shape.
        cd = make_cd(raw, workload_ns)
        template_name = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
        wire = wait_for(f"the workload claim template\n{controller_log.read_text()[-3000:]}",
                        lambda: _get_or_none(raw, f"{api}/namespaces/{workload_ns}/resourceclaimtemplates/"
                                             f"{template_name}"), 30)
        assert written_in(wire) == {f"resource.k8s.io/{version}"}
        assert wire["spec"]["spec"]["devices"]["requests"] == [
            wire_request(version, constants.DEVICE_CLASS_DEFAULT_CHANNEL, uid_of(cd))]
        assert wire["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == uid_of(cd)

        # The plugin publishes the node's slice, in the served version's shape too.
        plugin.start()

        def slices() -> list[dict]:
            return raw.request("GET", f"{api}/resourceslices",
                               query={"fieldSelector": f"spec.nodeName={sim.name}"})["items"]

        (published,) = wait_for(f"the node's ResourceSlice\n{plugin.log_tail()}", slices, 20)
        assert written_in(published) == {f"resource.k8s.io/{version}"}
        assert published["spec"]["devices"] == [
            wire_device(version, "channel-0", {"type": {"string": "channel"}, "id": {"int": 0}}),
            wire_device(version, "daemon-0", {"type": {"string": "daemon"}, "id": {"int": 0}})]

        # The 1.33 scheduler allocates channel-0 to a pod of the template; the plugin prepares it.
        raw.create(PODS, {"metadata": {"name": "workload", "namespace": workload_ns}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": sim.name},
            "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template_name}],
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "imex"}]}}]}},
            workload_ns)

        def allocated() -> dict | None:
            claims = raw.list(CLAIMS, workload_ns)["items"]
            return claims[0] if claims and (claims[0].get("status") or {}).get("allocation") else None

        claim = wait_for("the scheduler to allocate the workload's claim", allocated, 30)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (constants.DRIVER_NAME, sim.name, "channel-0")
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] \
            == constants.DEVICE_CLASS_DEFAULT_CHANNEL, f"cdriver's client reads {version} claims as v1"

        kubelet = Kubelet(plugin)
        waiting = kubelet.prepare(claim)[uid_of(claim)]
        assert "is not ready on node" in waiting.error
        assert node_label(raw, sim) == uid_of(cd)
        # No daemon pod runs here, so the controller would (rightly) demote a clique entry written
        # for it; its part is proven above: stop it before standing in for the daemon.
        controller.terminate()
        assert controller.wait(15) == 0, controller_log.read_text()[-3000:]
        set_clique_ready(raw, release_ns, cd, sim)
        ready = kubelet.prepare(claim)[uid_of(claim)]
        assert ready.error == ""

        def reported() -> list[dict]:
            devices = (raw.get(CLAIMS, claim["metadata"]["name"], workload_ns).get("status") or {}).get("devices")
            return [(d["driver"], d["conditions"][0]["reason"]) for d in devices or []]

        # the plugin's status.devices entry, written through the served beta version
        wait_for(lambda: f"the claim's status.devices to say DaemonReady, says {reported()}\n{plugin.log_tail()}",
                 lambda: reported() == [(constants.DRIVER_NAME, "DaemonReady")], 10)
        (device,) = ready.devices
        assert list(device.cdi_device_ids) == [f"{constants.CDI_KIND_CLAIM}={uid_of(claim)}-channel-0"]
        assert kubelet.unprepare(claim) == {uid_of(claim): ""}
        assert plugin.checkpoint() == {}

        # 1.33 serves no shared devices (DRAConsumableCapacity): the server drops
        # allowMultipleAllocations and the plugin publishes its channel for one claim, as before
        assert "does not keep allowMultipleAllocations" in plugin.log_path.read_text(), plugin.log_tail()
        assert "does not keep bindingConditions" in plugin.log_path.read_text(), plugin.log_tail()
        assert not any("bindingConditions" in str(d) for d in slices()[0]["spec"]["devices"])
        assert not any("allowMultipleAllocations" in d or "basic" in d and "allowMultipleAllocations" in d["basic"]
                       for d in slices()[0]["spec"]["devices"])

        # 1.33 serves no device taints (alpha, off): a broken fabric's taint is dropped by the API
        # server, and the plugin stops asking for it instead of rewriting its slice over and over
        from cdriver.sim.gpu.driver_root import rerender_driver_root

        rerender_driver_root(sim.root.root, fabric_state="in_progress")
        wait_for(f"the plugin to see the server drop the taint\n{plugin.log_tail()}",
                 lambda: "does not keep device taints" in plugin.log_path.read_text(), 30)
        (before,) = slices()
        # an absence over a window, not an event: a rewrite loop is driven by the slice's own watch
        # events, so it would show within milliseconds; 3 s also spans part of a 5 s health probe
        time.sleep(3)
        (after,) = slices()
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "no rewrite loop"
        assert not any(d.get("taints") for d in after["spec"]["devices"])
        rerender_driver_root(sim.root.root, fabric_state="completed")
        assert plugin.stop() == 0
        assert "Traceback" not in plugin.log_path.read_text(), plugin.log_tail(80)
    finally:
        plugin.stop()
        controller.terminate()
        controller.wait(15)
        sim.registered.delete()
        subprocess.run(["rm", "-rf", str(base)], check=False)
    assert "Traceback" not in controller_log.read_text(), controller_log.read_text()[-3000:]


def test_chart_upgrade_speaks_v1beta2_and_its_policy_reads_v1beta2_claims(
        old_cluster: Any, release_ns: str, workload_ns: str) -> None:
    raw = serve(old_cluster, BOTH_BETAS)
    helm(old_cluster, "upgrade", RELEASE, str(CHART_DIR))
    manifest = [d for d in yaml.safe_load_all(helm(old_cluster, "get", "manifest", RELEASE)) if d]
    assert {d["metadata"]["name"]: d["apiVersion"] for d in manifest if d["kind"] == "DeviceClass"} == {
        name: "resource.k8s.io/v1beta2"
        for name in (constants.DEVICE_CLASS_DEFAULT_CHANNEL, constants.DEVICE_CLASS_DAEMON)}
    for name in (constants.DEVICE_CLASS_DEFAULT_CHANNEL, constants.DEVICE_CLASS_DAEMON):
        assert raw.get(RESOURCES["deviceclasses"], name)["metadata"]["name"] == name
    message = wait_for("the admission policy to refuse a v1beta2 claim for the daemon class",
                       lambda: daemon_claim_refusal(raw, "v1beta2", workload_ns), 20)
    assert "is reserved for the IMEX daemons" in message


def _get_or_none(raw: RawClient, path: str) -> dict | None:
    try:
        return raw.request("GET", path)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


def test_policy_keeps_a_plugin_to_its_drivers_device_status_of_claims_on_its_own_node(
        old_cluster: Any, release_ns: str, workload_ns: str, tmp_path: Path) -> None:
    """Before 1.36 the API server does not check a driver's permission on status.devices: the chart's
    admission policy alone keeps a plugin to claims allocated on its own node, to its own driver's
    entries, and away from the claim's reservations."""
    from tests.support.claim_status import OTHER_DRIVER, claim_of_two_drivers, device_status
    from tests.support.tokens import pod_token, token_client

    raw = serve(old_cluster, BOTH_BETAS)
    suffix = uuid.uuid4().hex[:5]
    node1, node2 = f"old-n1-{suffix}", f"old-n2-{suffix}"
    account = f"{RELEASE}-cdriver-kubeletplugin"
    for node in (node1, node2):
        raw.create(RESOURCES["nodes"], {"metadata": {"name": node}})
    pod = raw.create(PODS, {"metadata": {"name": f"{RELEASE}-cdriver-kubelet-plugin-{suffix}"}, "spec": {
        "nodeName": node1, "serviceAccountName": account, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "cdriver:test"}]}}, release_ns)
    plugin = token_client(old_cluster, tmp_path, "plugin", pod_token(raw, account, pod, release_ns))

    def put(claim: dict, entries: list[dict], **extra: Any) -> dict:
        fresh = plugin.get(CLAIMS, claim["metadata"]["name"], workload_ns)
        fresh["status"] = {**fresh["status"], "devices": entries, **extra}
        return plugin.update_status(CLAIMS, fresh, workload_ns)

    def refusal(claim: dict, entries: list[dict], **extra: Any) -> str:
        try:
            put(claim, entries, **extra)
        except ApiError as exc:
            return exc.message if exc.status in (403, 422) else ""
        return ""

    try:
        mine = claim_of_two_drivers(raw, workload_ns, "on-node1", node1)
        theirs = claim_of_two_drivers(raw, workload_ns, "on-node2", node2)
        entry = device_status(constants.DRIVER_NAME, node1)
        other_node = wait_for("the policy to refuse another node's claim",
                              lambda: refusal(theirs, [device_status(constants.DRIVER_NAME, node2)]), 20)
        assert "may write the status only of claims allocated on its own node" in other_node, other_node
        assert "may change only driver" in refusal(mine, [entry, device_status(OTHER_DRIVER, node1)])
        intruder = {"resource": "pods", "name": "x", "uid": "00000000-0000-0000-0000-000000000001"}
        assert "not its allocation, reservations" in refusal(mine, [entry], reservedFor=[intruder])
        written = put(mine, [entry])
        assert [d["driver"] for d in written["status"]["devices"]] == [constants.DRIVER_NAME]
    finally:
        raw.delete(PODS, pod["metadata"]["name"], release_ns, grace_period_seconds=0)
        for node in (node1, node2):
            raw.delete(RESOURCES["nodes"], node)
