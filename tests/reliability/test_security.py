"""Security on a running cluster: file modes of what the kubelet plugin creates, no secret in
any log line, and a claim cannot reach another namespace's domain or leave its directory.

(The per-role RBAC allow-list is tests/integration/chart/test_chart_rbac.py, part of this suite.)
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

from cdriver.api import constants
from cdriver.kube.errors import ApiError
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME
from cdriver.roles.kubelet_plugin.instances import instance_of_dra, instance_of_registration
from cdriver.sim.world import scenario
from tests.reliability import cluster as rc
from tests.reliability.figures import record

TIMEOUT = 120.0
JWT = re.compile(r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")
PEM = re.compile(r"-----BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)-----")


def running_domain(world: Any, ns: str, name: str) -> tuple[str, list[str]]:
    clique = rc.cliques(world)[0]
    uid = rc.start_domain(world, ns, name, clique)
    pods = [f"{name}-w{i}" for i in range(2)]
    assert rc.converged(world, f"{name} running", TIMEOUT, extra=rc.pods_running(world, ns, pods)) == []
    return uid, rc.clique_nodes(world, clique)


def finish(world: Any, ns: str, name: str) -> None:
    rc.delete_domain(world, ns, name)
    assert rc.converged(world, f"{name} deleted", TIMEOUT, extra=rc.gone(world, ns, [name])) == []


def mode_problems(path: Path, forbidden: int, what: str) -> list[str]:
    mode = stat.S_IMODE(path.lstat().st_mode)
    return [f"{what} {path.name} has mode {mode:04o} (must not allow {forbidden:04o})"] if mode & forbidden else []


def test_sockets_cdi_specs_and_checkpoint_have_plugin_modes(rel_world: Any, rel_namespace: str) -> None:
    """Sockets and the checkpoint: owner only; CDI specs and dirs: nobody but the owner writes."""
    _, nodes = running_domain(rel_world, rel_namespace, "modes")
    checked, problems = 0, []
    for name in nodes:
        layout = rel_world.node(name).agent.layout
        plugin_dir = layout.plugins_dir / constants.DRIVER_NAME
        # the sockets of the plugin pod serving now (named after its pod UID on 1.33+)
        dra_sockets = [p for p in plugin_dir.glob("dra*.sock") if instance_of_dra(p.name) is not None]
        reg_sockets = [p for p in layout.registry_dir.glob(f"{constants.DRIVER_NAME}-*reg.sock")
                       if instance_of_registration(p.name) is not None]
        assert len(dra_sockets) == len(reg_sockets) == 1, f"{name}: sockets {dra_sockets} {reg_sockets}"
        files = [(dra_sockets[0], 0o077, "gRPC socket"),
                 (reg_sockets[0], 0o077, "registration socket"),
                 (plugin_dir / CHECKPOINT_FILE_NAME, 0o077, "checkpoint"),
                 (plugin_dir, 0o022, "plugin directory")]
        cdi_dir = layout.host_path(rc.CDI_ROOT)
        files += [(p, 0o022, "CDI spec") for p in sorted(cdi_dir.glob("*.yaml"))]
        assert any(what == "CDI spec" for _, _, what in files), f"no CDI spec on {name}"
        for path, forbidden, what in files:
            checked += 1
            problems += mode_problems(path, forbidden, f"{name}: {what}")
    record("security", "file modes (sockets, CDI, checkpoint)", checked, checked - len(problems))
    finish(rel_world, rel_namespace, "modes")
    assert problems == []


def secrets(world: Any) -> list[str]:
    """Token and key material that exists in the world: service-account tokens the nodes mounted
    and the control plane's private keys (one line of each)."""
    out = set()
    for node in world.nodes:
        for token in node.agent.layout.pods_dir.glob("*/volumes/**/token"):
            text = token.read_text(errors="replace").strip()
            if len(text) > 40:
                out.add(text)
    for key in Path(world.cluster.pki.dir).glob("**/*.key"):
        lines = [ln for ln in key.read_text(errors="replace").splitlines() if ln and not ln.startswith("-----")]
        out.update(lines[1:2])
    return sorted(out)


def test_no_token_key_or_certificate_reaches_a_log(rel_world: Any) -> None:
    known = secrets(rel_world)
    assert known, "found no token or key to look for"
    logs = [p for node in rel_world.nodes for p in node.agent.layout.logs_dir.glob("**/*.log")]
    found = []
    for path in logs:
        text = path.read_text(errors="replace")
        found += [f"{path.name}: {m.group(0)[:40]}..." for m in (*JWT.finditer(text), *PEM.finditer(text))]
        found += [f"{path.name}: a known secret" for s in known if s in text]
    record("security", "logs without token/key/cert", len(logs), len(logs) - len({f.split(':')[0] for f in found}),
           secrets_searched=len(known))
    assert found == []


def channel_claim(name: str, domain_id: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"devices": {
        "requests": [{"name": "channel", "exactly": {"deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL}}],
        "config": [{"requests": ["channel"], "opaque": {"driver": constants.DRIVER_NAME, "parameters": {
            "apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": domain_id}}}]}}}


def pod_with_claim(name: str, ns: str, claim: str, node: str) -> dict:
    pod = scenario.workload_pod(name, ns, "unused", node=node)
    pod["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": claim}]
    return pod


def refused(world: Any, ns: str, claim: dict, pod_name: str, node: str, expect: str) -> bool:
    """The claim is refused at admission, or its pod never starts and an Event says why."""
    try:
        world.raw.create(scenario.CLAIMS, claim, ns)
    except ApiError as exc:
        return exc.status in (400, 403, 422) and expect in str(exc)
    world.raw.create(scenario.PODS, pod_with_claim(pod_name, ns, claim["metadata"]["name"], node), ns)

    def said() -> scenario.Seen:
        events = scenario.events_for(world.raw, ns, claim["metadata"]["name"]) + \
            scenario.events_for(world.raw, ns, pod_name)
        messages = [e.get("message", "") for e in events]
        return scenario.Seen(any(expect in m for m in messages), messages, str(messages[-3:]))

    scenario.wait_for(f"an Event saying {expect!r}", said, TIMEOUT)
    pod = world.raw.get(scenario.PODS, pod_name, ns)
    return scenario.pod_phase(pod) != "Running"


def test_a_claim_cannot_name_another_namespaces_domain_or_leave_its_directory(rel_world: Any,
                                                                              rel_namespace: str) -> None:
    uid, nodes = running_domain(rel_world, rel_namespace, "victim")
    other = f"{rel_namespace[:40]}-other"
    scenario.ensure_namespace(rel_world.raw, other)
    free = [n.name for n in rel_world.nodes if n.name not in nodes]
    cases = {
        "another namespace's domain": (channel_claim("steal", uid), "namespace"),
        "a domainID that leaves its directory": (channel_claim("escape", "../../../etc"), "domainID"),
    }
    results = {}
    for i, (what, (claim, expect)) in enumerate(cases.items()):
        results[what] = refused(rel_world, other, claim, f"p{i}", free[i % len(free)], expect)
    before = {n: rc.node_files(rel_world)[n] for n in free}
    for node in free:
        root = rel_world.node(node).agent.layout.root
        assert not (root / "etc" / "compute-domain").exists()
        assert not any(p.name == "etc" for p in (root / "var" / "lib").glob("**/domains/*"))
    for i in range(len(cases)):
        rc.delete_quietly(rel_world, scenario.PODS, f"p{i}", other)
    rel_world.raw.delete(RESOURCES["namespaces"], other)
    record("security", "claims reaching beyond their domain", len(cases), sum(results.values()))
    assert all(f["cdiClaims"] == [] for f in before.values()), before
    assert results == {what: True for what in cases}, results
    assert rc.converged(rel_world, "victim still running", TIMEOUT,
                        extra=rc.pods_running(rel_world, rel_namespace, ["victim-w0", "victim-w1"])) == []
    finish(rel_world, rel_namespace, "victim")
