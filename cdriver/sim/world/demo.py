"""The narrated ComputeDomain demo on a simulated cluster (`cdriver sim demo`, `make demo`).

Creates a ComputeDomain and a two-pod workload pinned to clique 0, then walks the evidence
chain a user would follow on a real NVL72 rack — CD uid → generated template → claim
allocation → node label → daemon pod and claim → clique entry Ready → CDI ID → channel device
inside each container → IMEX domain UP → `cdriver diagnose` passing every link — and finally
deletes everything and shows that nothing remains. Every step is a check; the demo fails on
the first one that does not hold.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdriver.api import constants
from cdriver.cdi.writer import claim_spec_name, spec_path
from cdriver.imex.config import IMEX_CTL_BINARY, IMEXD_CONFIG
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.gpu.driver_root import cdriver_command
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld

DEMO_NAMESPACE = "demo"
CD_NAME = "demo-domain"
TEMPLATE = "demo-channel"


@dataclass
class DemoReport:
    """What the demo checked, in order, with the time each step took."""

    steps: list[tuple[str, str, float]] = field(default_factory=list)  # (check, evidence, seconds)
    ok: bool = False
    error: str = ""


class Narrator:
    """Prints each check and its evidence as the demo goes."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.report = DemoReport()

    def check(self, title: str, fn: Callable[[], str]) -> None:
        start = time.monotonic()
        self.echo(f"--- {title}")
        evidence = fn()
        elapsed = time.monotonic() - start
        for line in evidence.splitlines():
            self.echo(f"    {line}")
        self.echo(f"    ok ({elapsed:.1f} s)")
        self.report.steps.append((title, evidence, elapsed))


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data or ""


def exec_in_pod(world: SimWorld, namespace: str, pod: dict, argv: list[str], container: str | None = None) -> Any:
    """`kubectl exec` into `pod`, exactly as a user checks a workload on a real cluster."""
    return world.exec(namespace, pod["metadata"]["name"], argv, container)


def run_demo(world: SimWorld, echo: Callable[[str], None] = print) -> DemoReport:
    """The scenario; returns the report (report.ok is False with .error set on failure)."""
    n = Narrator(echo)
    raw = world.raw
    state: dict[str, Any] = {}
    clique0 = sorted({node.clique for node in world.nodes if node.clique})[0]
    clique0_nodes = sorted(node.name for node in world.nodes if node.clique == clique0)
    try:
        def create() -> str:
            scenario.ensure_namespace(raw, DEMO_NAMESPACE)
            cd = raw.create(scenario.CDS, scenario.compute_domain(CD_NAME, DEMO_NAMESPACE, TEMPLATE), DEMO_NAMESPACE)
            state["uid"] = cd["metadata"]["uid"]
            return f"ComputeDomain {DEMO_NAMESPACE}/{CD_NAME} uid {state['uid']}"

        n.check("create a ComputeDomain", create)
        uid = state["uid"]

        def template() -> str:
            rct = scenario.wait_for(f"ResourceClaimTemplate {DEMO_NAMESPACE}/{TEMPLATE}",
                                    lambda: raw.get_or_none(scenario.RCTS, TEMPLATE, DEMO_NAMESPACE), 60)
            params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
            if params.get("domainID") != uid:
                raise scenario.ScenarioError(f"template domainID {params.get('domainID')!r} != CD uid {uid}")
            return (f"template {TEMPLATE}: deviceClass "
                    f"{rct['spec']['spec']['devices']['requests'][0]['exactly']['deviceClassName']}, "
                    f"opaque {params['kind']} domainID={params['domainID']} "
                    f"allocationMode={params.get('allocationMode', constants.ALLOCATION_MODE_SINGLE)}")

        n.check("the controller generated the workload claim template", template)

        names = [f"workload-{i}" for i in range(len(clique0_nodes))]

        def workload() -> str:
            for name in names:
                raw.create(scenario.PODS,
                           scenario.workload_pod(name, DEMO_NAMESPACE, TEMPLATE, clique=clique0, group="demo"),
                           DEMO_NAMESPACE)
            pods = scenario.wait_pods_running(raw, DEMO_NAMESPACE, names, timeout=150)
            state["pods"] = pods
            placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
            if sorted(placed.values()) != clique0_nodes:
                raise scenario.ScenarioError(f"pods placed on {placed}, want one per node of clique {clique0}")
            return "\n".join(f"{k} Running on {v}" for k, v in sorted(placed.items()))

        n.check(f"two workload pods on clique {clique0} start", workload)

        def claims() -> str:
            lines = []
            for pod in state["pods"]:
                claim = scenario.claim_of(raw, pod)
                results = scenario.allocation(claim)
                if not results or results[0]["device"] != constants.DEVICE_CHANNEL_0:
                    raise scenario.ScenarioError(f"claim {claim['metadata']['name']} allocation {results}")
                r = results[0]
                lines.append(f"{pod['metadata']['name']}: claim {claim['metadata']['name']} -> "
                             f"{r['driver']} pool {r['pool']} device {r['device']}")
            return "\n".join(lines)

        n.check("each workload claim is allocated channel-0 from its node's pool", claims)

        def labels() -> str:
            labelled = scenario.nodes_labelled(raw, uid)
            if labelled != clique0_nodes:
                raise scenario.ScenarioError(f"nodes labelled {labelled}, want {clique0_nodes}")
            return f"{constants.LABEL_COMPUTE_DOMAIN}={uid} on {', '.join(labelled)}"

        n.check("the kubelet plugin labelled both nodes for the domain", labels)

        def daemons() -> str:
            pods = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
            lines = []
            for pod in pods:
                claim = scenario.claim_of(raw, pod, pod["spec"]["resourceClaims"][0]["name"])
                dev = scenario.allocation(claim)[0]["device"]
                lines.append(f"{pod['metadata']['name']} on {pod['spec']['nodeName']} "
                             f"({scenario.pod_phase(pod)}, ready={scenario.pod_ready(pod)}), "
                             f"claim {claim['metadata']['name']} -> {dev}")
            if sorted(p["spec"]["nodeName"] for p in pods) != clique0_nodes:
                raise scenario.ScenarioError(f"daemon pods: {lines}")
            return f"DaemonSet {constants.daemon_object_name(uid)}\n" + "\n".join(lines)

        n.check("the IMEX daemon DaemonSet runs one pod per labelled node", daemons)

        def cliques() -> str:
            entries = scenario.clique_entries(raw, DRIVER_NAMESPACE, uid)
            name = constants.clique_object_name(uid, clique0)
            daemons = entries.get(name) or []
            ready = sorted(d["nodeName"] for d in daemons if d.get("status") == constants.STATUS_READY)
            if ready != clique0_nodes:
                raise scenario.ScenarioError(f"clique {name}: {daemons}")
            return "\n".join(f"{name}: {d['nodeName']} {d['ipAddress']} index {d['index']} {d['status']}"
                             for d in sorted(daemons, key=lambda d: d["index"]))

        n.check("both daemons are Ready in the ComputeDomainClique", cliques)

        def cdi() -> str:
            lines = []
            for pod in state["pods"]:
                claim = scenario.claim_of(raw, pod)
                node = world.node(pod["spec"]["nodeName"])
                spec_file = spec_path(node.cdi_dir, claim_spec_name(claim["metadata"]["uid"]))
                spec = json.loads(spec_file.read_text())
                ids = [f"{spec['kind']}={d['name']}" for d in spec["devices"]]
                paths = [dn["path"] for d in spec["devices"] for dn in d["containerEdits"].get("deviceNodes", [])]
                lines.append(f"{pod['metadata']['name']}: CDI {', '.join(ids)} -> {', '.join(paths)}")
            return "\n".join(lines)

        n.check("the plugin wrote each claim's CDI spec", cdi)

        def channel() -> str:
            lines = []
            for pod in state["pods"]:
                dev = channel_device_path(0)
                out = exec_in_pod(world, DEMO_NAMESPACE, pod, ["sh", "-c", f"test -c {dev} && ls -l {dev}"])
                if out.returncode != 0:
                    raise scenario.ScenarioError(f"{pod['metadata']['name']}: {dev} is not a character device "
                                                 f"inside the container: {out.stdout!r} {out.stderr!r}")
                lines.append(f"{pod['metadata']['name']}: {_text(out.stdout).strip()}")
            return "\n".join(lines)

        n.check(f"{channel_device_path(0)} is a character device inside each container", channel)

        def domain_up() -> str:
            pod = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)[0]

            def probe() -> scenario.Seen:
                out = exec_in_pod(world, DRIVER_NAMESPACE, pod,
                                  [IMEX_CTL_BINARY, "-c", IMEXD_CONFIG, "-N", "-j"])
                try:
                    doc = json.loads(_text(out.stdout))
                except json.JSONDecodeError:
                    return scenario.Seen(False, None, f"{_text(out.stdout)!r} {_text(out.stderr)!r}")
                return scenario.Seen(doc.get("status") == "UP", doc, json.dumps(doc)[:300])

            doc = scenario.wait_for("IMEX domain UP", probe, 60)
            nodes = doc.get("nodes") or {}
            return f"domain {doc['status']}: " + ", ".join(
                f"{v.get('host')} {v.get('status')} {v.get('version')}" for v in nodes.values())

        n.check("the IMEX domain between the two daemons is UP", domain_up)

        def diagnose() -> str:
            argv = ["diagnose", "computedomain", CD_NAME, "-n", DEMO_NAMESPACE, "--exec",
                    "--kubeconfig", str(world.kubeconfig), "--kubectl", str(world.kubectl)]
            out = subprocess.run([*cdriver_command(), *argv], capture_output=True, text=True, timeout=120)
            report = out.stdout.rstrip("\n") or out.stderr.rstrip("\n")
            if out.returncode != 0:
                raise scenario.ScenarioError(f"diagnose found a broken link:\n{report}")
            return f"$ cdriver diagnose computedomain {CD_NAME} -n {DEMO_NAMESPACE} --exec\n{report}"

        n.check("cdriver diagnose finds every link of the domain holding", diagnose)

        def cleanup() -> str:
            for name in names:
                raw.delete(scenario.PODS, name, DEMO_NAMESPACE)
            raw.delete(scenario.CDS, CD_NAME, DEMO_NAMESPACE)

            def gone() -> scenario.Seen:
                left = scenario.generated_objects(raw, DRIVER_NAMESPACE, uid)
                pods = [p for p in names if raw.get_or_none(scenario.PODS, p, DEMO_NAMESPACE)]
                cd = raw.get_or_none(scenario.CDS, CD_NAME, DEMO_NAMESPACE)
                ok = not any(left.values()) and not pods and cd is None
                return scenario.Seen(ok, left, json.dumps({**left, "workload pods": pods, "cd": bool(cd)}))

            left = scenario.wait_for("every generated object to be deleted", gone, 120)
            return "nothing remains: " + ", ".join(f"{k}: {len(v)}" for k, v in left.items())

        n.check("delete the workload and the ComputeDomain; nothing remains", cleanup)
        n.report.ok = True
    except Exception as e:  # the report says which check failed and why
        n.report.error = f"{type(e).__name__}: {e}"
        echo(f"FAILED: {n.report.error}")
        tails = world.pod_log_tails()
        if tails:
            echo("driver logs (last lines):\n" + tails)
    return n.report
