"""End to end, `cdriver diagnose` on a simulated cluster: each boundary that can break locally is
broken for real, and diagnose must name that boundary first, with its evidence, in text and JSON.
Beside it runs a real Prometheus with the chart's scrape configuration and alert rules: a healthy
domain raises no alert, and the failures an alert exists for (nvidia-imex failing at start, a node
label removed by hand, the kubelet plugin gone from a node) make that alert fire, naming the
diagnose command, and clear once fixed.

One cluster serves every case; each case uses its own namespace and cleans up after itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cdriver.api import constants
from cdriver.diagnose import names
from cdriver.kube.resources import RESOURCES
from cdriver.sim.monitoring.prometheus import LocalPrometheus
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.conftest import chart_device_classes
from tests.support import monitoring
from tests.support.waiting import wait_for
from tests.support.world import IMEX_PORT, hold_imex_port, start_world

NON_FABRIC_NODE = "cpu-1"
DEPLOYMENTS = RESOURCES["deployments"]
DEVICE_CLASSES = RESOURCES["deviceclasses"]
PLUGIN_SELECTOR = "app.kubernetes.io/component=kubelet-plugin"


#: the alerts these tests break things for, with `for:` and windows of seconds instead of minutes
#: (scraped and evaluated every 2 s); every other alert keeps the chart's defaults
ALERT_VALUES = ["--set", "monitoring.alerts.imexDaemonNotReady.for=10s",
                "--set", "monitoring.alerts.imexStartFailing.window=30s",
                "--set", "monitoring.alerts.domainLabelMissing.for=10s",
                "--set", "monitoring.alerts.pluginGone.for=10s"]
ALERT_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4, "extra_nodes": (NON_FABRIC_NODE,)}, "dg")


@pytest.fixture(scope="module")
def prom(world: SimWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    yield from monitoring.start_prometheus(world, tmp_path_factory.mktemp("prometheus"), ALERT_VALUES)


def assert_names_diagnose(alert: dict) -> None:
    """An alert's annotations say which boundary broke and the diagnose command to run."""
    text = " ".join(alert["annotations"].values())
    assert "cdriver diagnose" in text, alert["annotations"]


def diagnose(world: SimWorld, *args: str, kubeconfig: str = "") -> subprocess.CompletedProcess:
    """`cdriver diagnose ARGS` as a user runs it: a separate process with the cluster's kubeconfig."""
    env = {**os.environ, "KUBECONFIG": kubeconfig or str(world.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "cdriver", "diagnose", *args, "--kubectl", str(world.kubectl)],
                          capture_output=True, text=True, timeout=120, env=env)


def first_broken(world: SimWorld, target: list[str], key: str, verdict: str = "FAIL",
                 timeout: float = 90.0) -> tuple[dict, str]:
    """Wait until diagnose names `key` as the first broken link; return (JSON chain, text output)."""
    seen: dict = {}

    def probe() -> tuple[dict, str] | None:
        out = diagnose(world, *target, "-o", "json")
        doc = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {"raw": out.stdout + out.stderr}
        seen["doc"] = doc
        chain = (doc.get("chains") or [{}])[0]
        if chain.get("firstBroken") != key:
            return None
        link = next(lk for lk in chain["links"] if lk["key"] == key)
        if link["verdict"] != verdict:
            return None
        assert out.returncode == (1 if verdict == "FAIL" else 3), out.stdout
        text = diagnose(world, *target)
        assert text.returncode == out.returncode
        return chain, text.stdout

    return wait_for(lambda: f"diagnose {' '.join(target)} to name {key} {verdict} first; last: "
                            f"{json.dumps(seen.get('doc'))[:3000]}",
                    probe, timeout, interval=1.0)


def link_of(chain: dict, key: str) -> dict:
    return next(lk for lk in chain["links"] if lk["key"] == key)


def assert_text_leads_with(text: str, key: str, *needles: str) -> None:
    lines = text.splitlines()
    assert lines[1].startswith(f"FIRST BROKEN LINK: FAIL {key}:"), text
    for needle in needles:
        assert needle in text, (needle, text)


def cliques(world: SimWorld) -> list[str]:
    return sorted({n.clique for n in world.nodes if n.clique})


def clique_nodes(world: SimWorld, clique: str) -> list[str]:
    return sorted(n.name for n in world.nodes if n.clique == clique)


def new_domain(world: SimWorld, ns: str, name: str, num_nodes: int = 0, wait_template: bool = True) -> str:
    scenario.ensure_namespace(world.raw, ns)
    cd = world.raw.create(scenario.CDS, scenario.compute_domain(name, ns, f"{name}-channel", num_nodes=num_nodes), ns)
    if wait_template:
        scenario.wait_for("workload template", lambda: world.raw.get_or_none(scenario.RCTS, f"{name}-channel", ns), 60)
    return cd["metadata"]["uid"]


def remove(world: SimWorld, ns: str, pods: list[str], cd: str, uid: str) -> None:
    for pod in pods:
        if world.raw.get_or_none(scenario.PODS, pod, ns):
            world.raw.delete(scenario.PODS, pod, ns)
    if world.raw.get_or_none(scenario.CDS, cd, ns):
        world.raw.delete(scenario.CDS, cd, ns)

    def gone() -> bool:
        left = scenario.generated_objects(world.raw, DRIVER_NAMESPACE, uid)
        return (not any(left.values()) and not any(world.raw.get_or_none(scenario.PODS, p, ns) for p in pods)
                and world.raw.get_or_none(scenario.CDS, cd, ns) is None)

    scenario.wait_for(f"domain {ns}/{cd} and its pods to be deleted", gone, 120)


def test_healthy_then_label_removed(world: SimWorld, prom: LocalPrometheus, e2e_namespace: str) -> None:
    """A healthy domain passes every link and raises no alert; then a node label removed by hand is
    named, and its alert fires until the label is back."""
    ns, raw = e2e_namespace, world.raw
    clique = cliques(world)[0]
    nodes = clique_nodes(world, clique)
    uid = new_domain(world, ns, "good")
    pod_names = [f"w{i}" for i in range(len(nodes))]
    for name in pod_names:
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "good-channel", clique=clique, group=ns), ns)
    pods = scenario.wait_pods_running(raw, ns, pod_names, 150)

    def healthy() -> subprocess.CompletedProcess | None:
        out = diagnose(world, "computedomain", "good", "-n", ns, "--exec", "-o", "json")
        return out if out.returncode == 0 else None

    out = wait_for(lambda: f"diagnose to pass:\n{diagnose(world, 'cd', 'good', '-n', ns).stdout}",
                   healthy, 90, interval=1.0)
    chain = json.loads(out.stdout)["chains"][0]
    assert chain["firstBroken"] is None and chain["mode"] == names.IMEX_MODE_DRIVER_MANAGED
    assert {lk["key"]: lk["verdict"] for lk in chain["links"]} == {
        k: "PASS" for k in ("installation", "resourceslices", "computedomain", "template", "workload", "allocation",
                            "node-label", "daemon", "clique", "cdi", "device")}
    assert link_of(chain, "computedomain")["ids"]["cdUID"] == uid
    for pod in pods:
        label = f"pod {ns}/{pod['metadata']['name']}"
        claim = scenario.claim_of(raw, pod)
        alloc = link_of(chain, "allocation")["ids"][label]
        assert (alloc["claimUID"], alloc["node"], alloc["device"]) == (
            claim["metadata"]["uid"], pod["spec"]["nodeName"], constants.DEVICE_CHANNEL_0)
        assert link_of(chain, "cdi")["ids"][label]["cdiID"] == (
            f"{constants.CDI_KIND_CLAIM}={claim['metadata']['uid']}-{constants.DEVICE_CHANNEL_0}")
        assert link_of(chain, "clique")["ids"][label]["cliqueID"] == clique
    text = diagnose(world, "computedomain", "good", "-n", ns, "--exec")
    assert text.returncode == 0
    assert text.stdout.splitlines()[1] == "every link holds"
    assert "result: all links PASS (exit 0)" in text.stdout
    print("\n--- sample: healthy domain\n" + text.stdout)
    assert_scraped_and_quiet(world, prom, uid, nodes)
    # The same as a kubectl plugin: kubectl finds kubectl-cdriver on PATH.
    plugin_dir = os.path.dirname(shutil.which("kubectl-cdriver") or sys.executable)
    env = {**os.environ, "PATH": f"{plugin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(world.kubeconfig)}
    out = subprocess.run([str(world.kubectl), "cdriver", "diagnose", "computedomain", "good", "-n", ns],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == f"computedomain {ns}/good  (IMEX mode: {names.IMEX_MODE_DRIVER_MANAGED})"

    victim = nodes[-1]
    (on_victim,) = [p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == victim]
    out = world.kubectl_cmd("label", "node", victim, f"{constants.LABEL_COMPUTE_DOMAIN}-")
    assert out.returncode == 0, out.stderr
    chain, text = first_broken(world, ["pod", on_victim, "-n", ns], "node-label")
    assert victim in link_of(chain, "node-label")["summary"]
    assert_text_leads_with(text, "node-label", f"node {victim}: {constants.LABEL_COMPUTE_DOMAIN}=<unset>",
                           f"next: kubectl get node {victim}")
    print("\n--- sample: node label removed by hand\n" + diagnose(world, "pod", on_victim, "-n", ns, "-q").stdout)
    alert = monitoring.wait_firing(prom, "CdriverDomainLabelMissing", {"node": victim}, ALERT_TIMEOUT)
    assert_names_diagnose(alert)
    out = world.kubectl_cmd("label", "node", victim, f"{constants.LABEL_COMPUTE_DOMAIN}={uid}")
    assert out.returncode == 0, out.stderr
    monitoring.wait_cleared(prom, "CdriverDomainLabelMissing", {"node": victim}, ALERT_TIMEOUT)
    remove(world, ns, pod_names, "good", uid)


def assert_scraped_and_quiet(world: SimWorld, prom: LocalPrometheus, uid: str, daemon_nodes: list[str]) -> None:
    """Prometheus found every role through pod discovery and scrapes it; no alert fires; every
    series the dashboard reads exists."""
    want = sorted([("controller", seen_controller_node(world), "", "up", "")]
                  + [("kubelet-plugin", n.name, "", "up", "") for n in world.nodes]
                  + [("imex-daemon", n, uid, "up", "") for n in daemon_nodes])
    wait_for(lambda: f"every role scraped: want {want}, targets {monitoring.target_summary(prom)}",
             lambda: monitoring.target_summary(prom) == want, 60, interval=1.0)
    firing = [a for a in prom.alerts() if a["state"] == "firing"]
    assert not firing, f"alerts on a healthy cluster: {json.dumps(firing)[:3000]}"
    names_on_dashboard = set().union(*(monitoring.series_named(e) for e in monitoring.panel_queries().values()))
    assert {"nvidia_dra_compute_domain_info", "cdriver_imex_daemon_ready"} <= names_on_dashboard
    present = set(prom.api("label/__name__/values"))
    assert names_on_dashboard <= present, f"dashboard series no role exposes: {sorted(names_on_dashboard - present)}"


def seen_controller_node(world: SimWorld) -> str:
    (pod,) = world.raw.list(scenario.PODS, DRIVER_NAMESPACE,
                            label_selector="app.kubernetes.io/component=controller")["items"]
    return pod["spec"]["nodeName"]


def namespace_reader_kubeconfig(world: SimWorld, ns: str, path: Path) -> Path:
    """A kubeconfig of a service account that may only get/list in `ns`."""
    raw = world.raw
    raw.create(RESOURCES["serviceaccounts"], {"metadata": {"name": "reader", "namespace": ns}}, ns)
    raw.create(RESOURCES["roles"], {"metadata": {"name": "reader", "namespace": ns}, "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}]}, ns)
    raw.create(RESOURCES["rolebindings"], {"metadata": {"name": "reader", "namespace": ns},
                                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                       "name": "reader"},
                                           "subjects": [{"kind": "ServiceAccount", "name": "reader",
                                                         "namespace": ns}]}, ns)
    token = raw.create_subresource(RESOURCES["serviceaccounts"], "reader", "token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        namespace=ns)["status"]["token"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "reader",
        "clusters": [{"name": "local", "cluster": {"server": world.cluster.server,
                                                   "certificate-authority": str(world.cluster.ca_file)}}],
        "users": [{"name": "reader", "user": {"token": token}}],
        "contexts": [{"name": "reader", "context": {"cluster": "local", "user": "reader"}}]}))
    return path


def test_rbac_hidden_objects_are_named_and_the_run_is_incomplete(world: SimWorld, e2e_namespace: str,
                                                                 tmp_path: Path) -> None:
    ns = e2e_namespace
    uid = new_domain(world, ns, "private")
    cfg = namespace_reader_kubeconfig(world, ns, tmp_path / "reader.kubeconfig")
    out = diagnose(world, "computedomain", "private", "-n", ns, "-o", "json", kubeconfig=str(cfg))
    assert out.returncode == 2, out.stdout + out.stderr
    chain = json.loads(out.stdout)["chains"][0]
    assert "cannot list resourceslices: forbidden" in link_of(chain, "resourceslices")["hidden"]
    assert link_of(chain, "template")["verdict"] == "PASS"  # the namespace itself is readable
    text = diagnose(world, "computedomain", "private", "-n", ns, kubeconfig=str(cfg))
    assert text.returncode == 2
    assert "NOT FULLY CHECKED" in text.stdout and "run as a user who can" in text.stdout
    remove(world, ns, [], "private", uid)


def test_template_name_conflict(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    scenario.ensure_namespace(raw, ns)
    raw.create(scenario.RCTS, {"metadata": {"name": "taken-channel", "namespace": ns}, "spec": {"spec": {"devices": {
        "requests": [{"name": "x", "exactly": {"deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL}}]}}}}, ns)
    uid = new_domain(world, ns, "taken", wait_template=False)
    chain, text = first_broken(world, ["computedomain", "taken", "-n", ns], "template")
    assert "name conflict" in link_of(chain, "template")["summary"]
    assert_text_leads_with(text, "template", f"ResourceClaimTemplate {ns}/taken-channel",
                           f"next: kubectl -n {ns} get resourceclaimtemplate taken-channel -o yaml")
    remove(world, ns, [], "taken", uid)


def test_num_nodes_larger_than_the_nodes_available(world: SimWorld, e2e_namespace: str) -> None:
    ns = e2e_namespace
    uid = new_domain(world, ns, "big", num_nodes=9)
    chain, text = first_broken(world, ["computedomain", "big", "-n", ns], "computedomain")
    fabric = sum(1 for n in world.nodes if n.clique)
    assert f"spec.numNodes is 9 but only {fabric} fabric-attached node(s)" in link_of(chain, "computedomain")["summary"]
    assert_text_leads_with(text, "computedomain", f"uid {uid}")
    remove(world, ns, [], "big", uid)


def test_deletion_blocked_by_a_finalizer(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    uid = new_domain(world, ns, "held")
    raw.patch(scenario.CDS, "held", [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/hold"}], ns,
              patch_type="json")
    raw.delete(scenario.CDS, "held", ns)
    chain, text = first_broken(world, ["computedomain", "held", "-n", ns], "computedomain")
    assert "blocked by finalizer(s) example.com/hold" in link_of(chain, "computedomain")["summary"]
    assert_text_leads_with(text, "computedomain", "do not force-remove it first")
    raw.patch(scenario.CDS, "held", {"metadata": {"finalizers": None}}, ns)
    remove(world, ns, [], "held", uid)


def test_non_fabric_node_selected(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    uid = new_domain(world, ns, "flat")
    raw.create(scenario.PODS, scenario.workload_pod("w", ns, "flat-channel", node=NON_FABRIC_NODE), ns)
    chain, text = first_broken(world, ["pod", "w", "-n", ns], "allocation")
    assert NON_FABRIC_NODE in link_of(chain, "allocation")["summary"]
    assert_text_leads_with(text, "allocation", f"on node {NON_FABRIC_NODE}", "not attached to an NVLink fabric")
    remove(world, ns, ["w"], "flat", uid)


def test_claim_not_referenced_by_the_container(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    uid = new_domain(world, ns, "unused")
    pod = scenario.workload_pod("w", ns, "unused-channel", node=NON_FABRIC_NODE)
    pod["spec"]["containers"][0]["resources"] = {}
    raw.create(scenario.PODS, pod, ns)
    chain, text = first_broken(world, ["pod", "w", "-n", ns], "workload")
    assert "no container lists it" in link_of(chain, "workload")["summary"]
    assert_text_leads_with(text, "workload", "containers using it: none")
    remove(world, ns, ["w"], "unused", uid)


def test_nvidia_imex_failing_at_start(world: SimWorld, prom: LocalPrometheus, e2e_namespace: str) -> None:
    """Another process holds the IMEX port on the daemon's address: nvidia-imex cannot start there,
    and the start-failure and daemon-not-Ready alerts fire until the port is free again."""
    ns, raw = e2e_namespace, world.raw
    node = world.node(clique_nodes(world, cliques(world)[1])[0])
    # the node's next two pods: the workload, then the domain's daemon (each pod has its own address)
    _workload_ip, daemon_ip = node.agent.pod_addresses.upcoming(2)
    holder = hold_imex_port(daemon_ip)
    try:
        uid = new_domain(world, ns, "blocked")
        raw.create(scenario.PODS, scenario.workload_pod("w", ns, "blocked-channel", node=node.name), ns)
        chain, text = first_broken(world, ["pod", "w", "-n", ns], "daemon")
        link = link_of(chain, "daemon")
        assert names.EVENT_IMEX_PORT_CONFLICT in link["summary"]
        assert link["ids"][f"pod {ns}/w"]["node"] == node.name
        assert_text_leads_with(text, "daemon", f"IMEX port {IMEX_PORT} on pod IP {daemon_ip}",
                               f"-c {names.DAEMON_CONTAINER}")
        for name in ("CdriverImexStartFailing", "CdriverImexDaemonNotReady"):
            assert_names_diagnose(monitoring.wait_firing(prom, name, {"node": node.name}, ALERT_TIMEOUT))
    finally:
        holder.close()
    scenario.wait_pods_running(raw, ns, ["w"], 150)
    for name in ("CdriverImexStartFailing", "CdriverImexDaemonNotReady"):
        monitoring.wait_cleared(prom, name, {"node": node.name}, ALERT_TIMEOUT)
    remove(world, ns, ["w"], "blocked", uid)


def plugin_pods_ready(world: SimWorld) -> bool:
    pods = world.raw.list(scenario.PODS, DRIVER_NAMESPACE, label_selector=PLUGIN_SELECTOR)["items"]
    ready = {p["spec"].get("nodeName") for p in pods
             if scenario.pod_ready(p) and not p["metadata"].get("deletionTimestamp")}
    return ready >= {n.name for n in world.nodes}


def test_plugin_not_running_on_a_node(world: SimWorld, prom: LocalPrometheus, e2e_namespace: str) -> None:
    """The kubelet plugin is taken off a node: diagnose names the node, and the plugin-gone alert
    fires for it until the plugin is back."""
    ns, raw = e2e_namespace, world.raw
    node = clique_nodes(world, cliques(world)[1])[-1]
    uid = new_domain(world, ns, "noplugin")
    (ds,) = raw.list(scenario.DAEMONSETS, DRIVER_NAMESPACE, label_selector=PLUGIN_SELECTOR)["items"]
    name = ds["metadata"]["name"]
    raw.patch(scenario.DAEMONSETS, name, {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}]}]}}}}}}}, DRIVER_NAMESPACE)
    try:
        # the template change replaces every node's plugin pod: once the others are back, the
        # only broken node is the one without a plugin
        others = {n.name for n in world.nodes} - {node}

        def others_back() -> bool:
            pods = world.raw.list(scenario.PODS, DRIVER_NAMESPACE, label_selector=PLUGIN_SELECTOR)["items"]
            ready = {p["spec"].get("nodeName") for p in pods
                     if scenario.pod_ready(p) and not p["metadata"].get("deletionTimestamp")
                     and p["spec"].get("affinity")}
            return ready >= others

        wait_for("the other nodes' plugins replaced and Ready", others_back, 120, interval=0.5)
        chain, text = first_broken(world, ["computedomain", "noplugin", "-n", ns], "resourceslices", timeout=120)
        assert f"node {node}:" in link_of(chain, "resourceslices")["summary"]
        assert_text_leads_with(text, "resourceslices", "no plugin pod",
                               f"--field-selector spec.nodeName={node}")
        assert_names_diagnose(monitoring.wait_firing(prom, "CdriverKubeletPluginGone", {"node": node}, ALERT_TIMEOUT))
    finally:
        raw.patch(scenario.DAEMONSETS, name, {"spec": {"template": {"spec": {"affinity": None}}}}, DRIVER_NAMESPACE)
    wait_for("every node's kubelet plugin to be ready again", lambda: plugin_pods_ready(world), 180)
    monitoring.wait_cleared(prom, "CdriverKubeletPluginGone", {"node": node}, ALERT_TIMEOUT)
    remove(world, ns, [], "noplugin", uid)


def test_device_class_missing(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    uid = new_domain(world, ns, "nocls")
    raw.delete(DEVICE_CLASSES, constants.DEVICE_CLASS_DEFAULT_CHANNEL)
    try:
        chain, text = first_broken(world, ["computedomain", "nocls", "-n", ns], "installation")
        summary = link_of(chain, "installation")["summary"]
        assert f"DeviceClass {constants.DEVICE_CLASS_DEFAULT_CHANNEL} is missing" in summary
        assert_text_leads_with(text, "installation", "next: kubectl get deviceclass")
    finally:
        for body in chart_device_classes():
            if raw.get_or_none(DEVICE_CLASSES, body["metadata"]["name"]) is None:
                raw.create(DEVICE_CLASSES, body)
    remove(world, ns, [], "nocls", uid)


def test_controller_scaled_to_zero(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    uid = new_domain(world, ns, "orphan")
    (dep,) = raw.list(DEPLOYMENTS, DRIVER_NAMESPACE, label_selector="app.kubernetes.io/component=controller")["items"]
    name = dep["metadata"]["name"]
    raw.patch(DEPLOYMENTS, name, {"spec": {"replicas": 0}}, DRIVER_NAMESPACE)
    try:
        chain, text = first_broken(world, ["computedomain", "orphan", "-n", ns], "installation")
        assert "scaled to 0 replicas" in link_of(chain, "installation")["summary"]
        assert_text_leads_with(text, "installation", f"Deployment {DRIVER_NAMESPACE}/{name}: ")
        out = diagnose(world, "--all", "-o", "json")
        assert json.loads(out.stdout)["exitCode"] == 1
    finally:
        raw.patch(DEPLOYMENTS, name, {"spec": {"replicas": 1}}, DRIVER_NAMESPACE)
    wait_for("the controller to be ready again",
             lambda: (raw.get(DEPLOYMENTS, name, DRIVER_NAMESPACE).get("status") or {}).get("readyReplicas"), 120)
    remove(world, ns, [], "orphan", uid)
