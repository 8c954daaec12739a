"""The chart's RBAC on the real API server: each role may do what its code does, and no more.

The chart's service accounts, Roles and bindings are rendered with helm and applied; each
role then acts with a token of its own service account. (The end-to-end tests run every role
in pods under exactly these accounts as well.)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdriver.api import constants
from cdriver.api.constants import (
    API_VERSION,
    DAEMON_SERVICE_ACCOUNT,
    GROUP,
    KIND_COMPUTE_DOMAIN_CLIQUE,
)
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.checkout import CHART_DIR
from cdriver.kube.errors import ApiError
from cdriver.kube.resources import RESOURCES
from cdriver.sim.world.scenario import compute_domain
from tests.reliability.figures import record
from tests.support.claim_status import OTHER_DRIVER, claim_of_two_drivers, device_status
from tests.support.tokens import pod_token, token_client

pytestmark = pytest.mark.reliability

NS = "rbac-proof"
RELEASE = "proof"
ACCOUNTS = {
    "controller": f"{RELEASE}-cdriver-controller",
    "plugin": f"{RELEASE}-cdriver-kubeletplugin",
    "daemon": DAEMON_SERVICE_ACCOUNT,
}
CLUSTER, DRIVER_NS = "cluster-wide", "driver namespace"
READ = ("get", "list", "watch")


def grants(*entries: tuple[str, str, str, tuple[str, ...]]) -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) for every verb of each (scope, group, resource, verbs)."""
    return {(scope, group, res, verb) for scope, group, res, verbs in entries for verb in verbs}


# Everything each account may do: the allow-list. Anything beyond it fails the test.
ALLOWED = {
    "controller": grants(
        (CLUSTER, constants.GROUP, "computedomains", (*READ, "update", "patch")),
        (CLUSTER, constants.GROUP, "computedomains/status", ("update", "patch")),
        (CLUSTER, "resource.k8s.io", "resourceclaimtemplates", (*READ, "create", "update", "patch", "delete")),
        (CLUSTER, "resource.k8s.io", "resourceclaims", ("get", "list")),
        (CLUSTER, "", "nodes", (*READ, "update", "patch")),
        (CLUSTER, "", "pods", READ),
        (CLUSTER, "", "events", ("create", "patch")),
        (DRIVER_NS, "apps", "daemonsets", (*READ, "create", "update", "patch", "delete")),
        (DRIVER_NS, constants.GROUP, "computedomaincliques", (*READ, "update", "patch", "delete")),
        (DRIVER_NS, "coordination.k8s.io", "leases", ("get", "create", "update")),
    ),
    "plugin": grants(
        (CLUSTER, constants.GROUP, "computedomains", READ),
        (CLUSTER, "resource.k8s.io", "resourceclaims", READ),
        (CLUSTER, "resource.k8s.io", "resourceclaims/status", ("update",)),
        (CLUSTER, "resource.k8s.io", f"resourceclaims/driver[{constants.DRIVER_NAME}]", ("associated-node:update",)),
        (CLUSTER, "resource.k8s.io", "resourceslices", (*READ, "create", "update", "delete")),
        (CLUSTER, "", "nodes", (*READ, "update", "patch")),
        (CLUSTER, "", "events", ("create", "patch")),
        (DRIVER_NS, constants.GROUP, "computedomaincliques", READ),
        (DRIVER_NS, "", "pods", ("get",)),
    ),
    "daemon": grants(
        (CLUSTER, constants.GROUP, "computedomains", READ),
        (DRIVER_NS, constants.GROUP, "computedomaincliques", (*READ, "create", "update", "patch")),
        (DRIVER_NS, "", "pods", (*READ, "patch")),
        (DRIVER_NS, "", "events", ("create", "patch")),
    ),
}
#: What every authenticated user may do (the API server's default discovery roles).
EVERYONE = {("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
            ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
            ("authentication.k8s.io", "selfsubjectreviews", "create"),
            *(("certificates.k8s.io", "clustertrustbundles", v) for v in READ)}

# (verb, group, resource, subresource, namespaced-in-driver-ns) each role's code uses.
USES = {
    "controller": [
        ("watch", GROUP, "computedomains", "", False), ("update", GROUP, "computedomains", "", False),
        ("update", GROUP, "computedomains", "status", False),
        ("create", "resource.k8s.io", "resourceclaimtemplates", "", False),
        ("delete", "resource.k8s.io", "resourceclaimtemplates", "", False),
        ("list", "resource.k8s.io", "resourceclaims", "", False),
        ("create", "apps", "daemonsets", "", True), ("delete", "apps", "daemonsets", "", True),
        ("watch", GROUP, "computedomaincliques", "", True), ("update", GROUP, "computedomaincliques", "", True),
        ("patch", "", "nodes", "", False), ("watch", "", "pods", "", False), ("create", "", "events", "", False),
        ("update", "coordination.k8s.io", "leases", "", True),
    ],
    "plugin": [
        ("get", GROUP, "computedomains", "", False), ("watch", GROUP, "computedomaincliques", "", True),
        ("get", "resource.k8s.io", "resourceclaims", "", False),
        ("update", "resource.k8s.io", "resourceclaims", "status", False),
        ("create", "resource.k8s.io", "resourceslices", "", False),
        ("delete", "resource.k8s.io", "resourceslices", "", False),
        ("patch", "", "nodes", "", False), ("create", "", "events", "", False),
        ("get", "", "pods", "", True),
    ],
    "daemon": [
        ("create", GROUP, "computedomaincliques", "", True), ("update", GROUP, "computedomaincliques", "", True),
        ("patch", GROUP, "computedomaincliques", "", True), ("watch", "", "pods", "", True),
        ("patch", "", "pods", "", True), ("get", GROUP, "computedomains", "", False),
        ("create", "", "events", "", True),
    ],
}


@pytest.fixture(scope="module")
def tokens(cluster, raw, chart_crds, tmp_path_factory) -> Iterator[dict[str, Path]]:
    """Apply the chart's RBAC objects; return a token kubeconfig per role."""
    from cdriver.sim.controlplane.binaries import helm_binary

    out = subprocess.run([str(helm_binary(echo=False)), "template", RELEASE, str(CHART_DIR), "--namespace", NS,
                          "--kube-version", "1.37.2", "-s", "templates/rbac-controller.yaml",
                          "-s", "templates/rbac-kubeletplugin.yaml", "-s", "templates/rbac-daemon.yaml",
                          "-s", "templates/admission-policies.yaml"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_kind = {res.kind: res for res in RESOURCES.values()}
    try:
        raw.create(RESOURCES["namespaces"], {"metadata": {"name": NS}})
    except ApiError as e:
        if not e.already_exists:
            raise
    for doc in docs:
        res = by_kind[doc["kind"]]
        raw.create(res, doc, namespace=NS if res.namespaced else None)
    base = tmp_path_factory.mktemp("rbac")
    ca = Path(cluster.ca_file).read_text()
    files = {}
    for role, account in ACCOUNTS.items():
        token = raw.create_subresource(RESOURCES["serviceaccounts"], account, "token",
                                       {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                        "spec": {"expirationSeconds": 3600}}, namespace=NS)["status"]["token"]
        ca_file = base / "ca.crt"
        ca_file.write_text(ca)
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": role,
               "clusters": [{"name": "local", "cluster": {"server": cluster.server,
                                                          "certificate-authority": str(ca_file)}}],
               "users": [{"name": role, "user": {"token": token}}],
               "contexts": [{"name": role, "context": {"cluster": "local", "user": role}}]}
        files[role] = base / f"{role}.kubeconfig"
        files[role].write_text(yaml.safe_dump(cfg))
    yield files
    for doc in reversed(docs):
        res = by_kind[doc["kind"]]
        try:
            raw.delete(res, doc["metadata"]["name"], namespace=NS if res.namespaced else None)
        except ApiError:
            pass


def allowed(raw, account: str, verb: str, group: str, resource: str, sub: str, namespaced: bool) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{NS}:{account}",
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
                       "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                              "subresource": sub, **({"namespace": NS} if namespaced else {})}}}
    result = raw.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(result["status"].get("allowed"))


@pytest.mark.parametrize("role", sorted(USES))
def test_each_role_may_do_what_its_code_does(raw, tokens, role: str) -> None:
    denied = [u for u in USES[role] if not allowed(raw, ACCOUNTS[role], *u)]
    assert denied == [], f"{role} lacks: {denied}"


def client(kubeconfig: Path):
    from cdriver.kube.client import new_raw_client

    return new_raw_client(str(kubeconfig))


def test_plugin_can_read_domains_but_cannot_delete_daemonsets(tokens) -> None:
    plugin = client(tokens["plugin"])
    plugin.list(COMPUTE_DOMAINS)  # allowed
    with pytest.raises(ApiError) as err:
        plugin.delete(RESOURCES["daemonsets"], "anything", namespace=NS)
    assert err.value.forbidden


def test_daemon_cannot_change_a_domain_spec(raw, namespace, tokens) -> None:
    cd = raw.create(COMPUTE_DOMAINS, compute_domain("cd", namespace, "t", mode=None), namespace=namespace)
    daemon = client(tokens["daemon"])
    assert daemon.get(COMPUTE_DOMAINS, "cd", namespace)["metadata"]["uid"] == cd["metadata"]["uid"]
    cd["spec"]["numNodes"] = 3
    with pytest.raises(ApiError) as err:
        daemon.update(COMPUTE_DOMAINS, cd, namespace=namespace)
    assert err.value.forbidden


def test_controller_cannot_create_cliques_or_delete_nodes(tokens) -> None:
    controller = client(tokens["controller"])
    with pytest.raises(ApiError) as err:
        controller.create(COMPUTE_DOMAIN_CLIQUES, {
            "apiVersion": API_VERSION, "kind": KIND_COMPUTE_DOMAIN_CLIQUE,
            "metadata": {"name": "x.y"}, "daemons": []}, namespace=NS)
    assert err.value.forbidden
    with pytest.raises(ApiError) as err:
        controller.delete(RESOURCES["nodes"], "any-node")
    assert err.value.forbidden


def test_roles_are_scoped_to_the_driver_namespace(tokens) -> None:
    """Daemon pods may manage cliques in the driver namespace only."""
    daemon = client(tokens["daemon"])
    with pytest.raises(ApiError) as err:
        daemon.list(COMPUTE_DOMAIN_CLIQUES, namespace="default")
    assert err.value.forbidden


def rules_in(account, namespace: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the account may use in ``namespace``, by SelfSubjectRulesReview."""
    review = account.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", body={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace}})
    assert not review["status"].get("incomplete"), review["status"]
    out = set()
    for rule in review["status"]["resourceRules"]:
        # a rule for named objects only is written resource[name]
        resources = [f"{r}[{n}]" for r in rule["resources"] for n in rule["resourceNames"]] \
            if rule.get("resourceNames") else rule["resources"]
        out |= {(g, r, v) for g in rule.get("apiGroups", []) for r in resources for v in rule["verbs"]}
    return out - EVERYONE


@pytest.mark.parametrize("role", sorted(ALLOWED))
def test_each_account_can_reach_only_its_allow_list(tokens, namespace, role: str) -> None:
    """Every verb x resource the account can reach, in the driver namespace and elsewhere."""
    account = client(tokens[role])
    anywhere = rules_in(account, namespace)
    in_driver_ns = rules_in(account, NS) - anywhere
    reach = {(CLUSTER, *r) for r in anywhere} | {(DRIVER_NS, *r) for r in in_driver_ns}
    beyond = sorted(reach - ALLOWED[role])
    record("security", f"RBAC allow-list: {role}", len(reach), len(reach) - len(beyond), beyond=len(beyond))
    assert beyond == [], f"{role} can reach more than its role needs: {beyond}"
    assert reach == ALLOWED[role], f"{role} lacks: {sorted(ALLOWED[role] - reach)}"


# --- admission policies: what RBAC cannot say, checked with tokens bound to real pods --------

DOMAIN = "0d5f8a3e-1111-2222-3333-444455556666"
OTHER_DOMAIN = "9a8b7c6d-1111-2222-3333-444455556666"
NODES = RESOURCES["nodes"]
PODS = RESOURCES["pods"]
SLICES = RESOURCES["resourceslices"]
CLIQUES = RESOURCES["computedomaincliques"]
CLAIMS = RESOURCES["resourceclaims"]
RCTS = RESOURCES["resourceclaimtemplates"]


def denied(fn, *args, **kwargs) -> str:
    """Run a request that must be refused; return the refusal's message."""
    with pytest.raises(ApiError) as err:
        fn(*args, **kwargs)
    assert err.value.status in (403, 422), err.value
    return str(err.value)


class Actors:
    """Two nodes; a kubelet plugin pod and a daemon pod of DOMAIN on node 1, with bound tokens."""

    def __init__(self, cluster, raw, tmp_path: Path) -> None:
        from uuid import uuid4

        suffix = uuid4().hex[:6]
        self.node1, self.node2 = f"rbac-n1-{suffix}", f"rbac-n2-{suffix}"
        for node in (self.node1, self.node2):
            raw.create(NODES, {"metadata": {"name": node, "labels": {"keep": "me"}}})
        tolerate = [{"operator": "Exists"}]

        def pod(name: str, account: str) -> dict:
            return raw.create(PODS, {"metadata": {"name": name, "namespace": NS, "labels": {"keep": "me"}},
                                     "spec": {"nodeName": self.node1, "serviceAccountName": account,
                                              "tolerations": tolerate,
                                              "containers": [{"name": "c", "image": "cdriver:test"}]}}, NS)

        self.plugin_pod = pod(f"{RELEASE}-cdriver-kubelet-plugin-{suffix}", ACCOUNTS["plugin"])
        self.daemon_pod = pod(f"{constants.daemon_object_name(DOMAIN)}-{suffix[:5]}", ACCOUNTS["daemon"])
        self.plugin = token_client(cluster, tmp_path, "plugin-pod",
                                   pod_token(raw, ACCOUNTS["plugin"], self.plugin_pod, NS))
        self.daemon = token_client(cluster, tmp_path, "daemon-pod",
                                   pod_token(raw, ACCOUNTS["daemon"], self.daemon_pod, NS))

    def cleanup(self, raw) -> None:
        for pod in (self.plugin_pod, self.daemon_pod):
            raw.delete(PODS, pod["metadata"]["name"], NS, grace_period_seconds=0)
        for node in (self.node1, self.node2):
            raw.delete(NODES, node)


@pytest.fixture(scope="module")
def actors(cluster, raw, tokens, tmp_path_factory) -> Iterator[Actors]:
    from tests.support.waiting import wait_for

    found = Actors(cluster, raw, tmp_path_factory.mktemp("actors"))

    def policy_active() -> bool:
        try:
            found.plugin.patch(NODES, found.node2, label_patch("probe", "x"))
        except ApiError as exc:
            return exc.status in (403, 422)
        raw.patch(NODES, found.node2, label_patch("probe", None))
        return False

    wait_for("the chart's admission policies to take effect", policy_active, 30)
    yield found
    found.cleanup(raw)


def label_patch(key: str, value: str | None) -> dict:
    return {"metadata": {"labels": {key: value}}}


def test_plugin_may_set_only_its_own_labels_on_its_own_node(raw, actors: Actors) -> None:
    plugin = actors.plugin
    node = plugin.patch(NODES, actors.node1, label_patch(constants.LABEL_COMPUTE_DOMAIN, DOMAIN))
    assert node["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] == DOMAIN
    plugin.patch(NODES, actors.node1, label_patch(constants.LABEL_COMPUTE_DOMAIN, None))
    msg = denied(plugin.patch, NODES, actors.node2, label_patch(constants.LABEL_COMPUTE_DOMAIN, DOMAIN))
    assert f"the kubelet plugin on node {actors.node1} may only update its own Node object" in msg
    msg = denied(plugin.patch, NODES, actors.node1, label_patch("node-role.kubernetes.io/control-plane", ""))
    assert f"may change only the labels {constants.LABEL_COMPUTE_DOMAIN} of its Node" in msg
    denied(plugin.patch, NODES, actors.node1, label_patch("keep", None))
    denied(plugin.patch, NODES, actors.node1, {"spec": {"unschedulable": True}})
    denied(plugin.patch, NODES, actors.node1, {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}})
    denied(plugin.patch, NODES, actors.node1, {"metadata": {"annotations": {"evil": "1"}}})
    node = raw.get(NODES, actors.node1)
    assert node["metadata"]["labels"] == {"keep": "me"} and not node["spec"].get("unschedulable")


def test_plugin_token_not_bound_to_a_pod_on_a_node_writes_nothing(tokens, actors: Actors) -> None:
    unbound = client(tokens["plugin"])
    msg = denied(unbound.patch, NODES, actors.node1, label_patch(constants.LABEL_COMPUTE_DOMAIN, DOMAIN))
    assert "only with the token of a pod bound to a node" in msg


def slice_body(name: str, node: str, driver: str = constants.DRIVER_NAME) -> dict:
    return {"metadata": {"name": name}, "spec": {"driver": driver, "nodeName": node,
                                                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                                                 "devices": [{"name": "daemon-0"}]}}


def test_plugin_may_write_only_its_own_nodes_slices_of_its_driver(raw, actors: Actors) -> None:
    plugin = actors.plugin
    own = plugin.create(SLICES, slice_body(f"{actors.node1}-own", actors.node1))
    own["spec"]["devices"].append({"name": "channel-0"})
    own = plugin.update(SLICES, own)
    foreign = raw.create(SLICES, slice_body(f"{actors.node2}-foreign", actors.node2))
    gpu = raw.create(SLICES, slice_body(f"{actors.node1}-gpu", actors.node1, driver="gpu.nvidia.com"))
    try:
        msg = denied(plugin.create, SLICES, slice_body(f"{actors.node2}-forged", actors.node2))
        assert "may write only ResourceSlices of driver compute-domain.nvidia.com for its own node" in msg
        denied(plugin.create, SLICES, slice_body(f"{actors.node1}-other", actors.node1, driver="gpu.nvidia.com"))
        denied(plugin.delete, SLICES, foreign["metadata"]["name"])
        denied(plugin.delete, SLICES, gpu["metadata"]["name"])
        foreign["spec"]["nodeName"] = actors.node1
        denied(plugin.update, SLICES, foreign)
        plugin.delete(SLICES, own["metadata"]["name"])
    finally:
        for obj in (foreign, gpu):
            raw.delete(SLICES, obj["metadata"]["name"])


def clique_body(domain: str, entries: list[dict]) -> dict:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN_CLIQUE,
            "metadata": {"name": constants.clique_object_name(domain, "uuid.1"), "namespace": NS,
                         "labels": {constants.LABEL_COMPUTE_DOMAIN: domain}},
            "daemons": entries}


def entry(node: str, index: int, status: str = constants.STATUS_NOT_READY) -> dict:
    return {"nodeName": node, "ipAddress": f"10.0.0.{index + 1}", "cliqueID": "uuid.1", "index": index,
            "status": status}


def test_daemon_may_write_only_its_own_entry_of_its_own_domains_clique(raw, actors: Actors) -> None:
    daemon, me, peer = actors.daemon, actors.node1, actors.node2
    theirs = raw.create(CLIQUES, clique_body(OTHER_DOMAIN, [entry(peer, 0)]), NS)
    try:
        msg = denied(daemon.create, CLIQUES, clique_body(OTHER_DOMAIN, [entry(me, 1)]), NS)
        theirs["daemons"].append(entry(me, 1))
        msg = denied(daemon.update, CLIQUES, theirs, NS)
        assert f"the IMEX daemon of ComputeDomain {DOMAIN} may write only its own domain's cliques" in msg
        mine = daemon.create(CLIQUES, clique_body(DOMAIN, [entry(me, 0)]), NS)
        mine = raw.update(CLIQUES, {**mine, "daemons": [*mine["daemons"], entry(peer, 1)]}, NS)
        mine["daemons"][0]["status"] = constants.STATUS_READY
        mine = daemon.update(CLIQUES, mine, NS)
        assert mine["daemons"][0]["status"] == constants.STATUS_READY
        forged = {**mine, "daemons": [mine["daemons"][0], {**mine["daemons"][1], "ipAddress": "6.6.6.6"}]}
        msg = denied(daemon.update, CLIQUES, forged, NS)
        assert f"the IMEX daemon on node {me} may change only its own entry ({me})" in msg
        denied(daemon.update, CLIQUES, {**mine, "daemons": [mine["daemons"][0]]}, NS)  # drop a peer
        denied(daemon.delete, CLIQUES, mine["metadata"]["name"], NS)
        assert raw.get(CLIQUES, mine["metadata"]["name"], NS)["daemons"][1] == entry(peer, 1)
    finally:
        for domain in (DOMAIN, OTHER_DOMAIN):
            raw.delete(CLIQUES, constants.clique_object_name(domain, "uuid.1"), NS)


def test_daemon_applies_only_its_own_entry_and_owner(raw, actors: Actors) -> None:
    """The daemon's join (server-side apply, no resourceVersion) passes the admission policy for
    its own entry and is refused for a peer's entry or another domain's clique."""
    from cdriver.roles.imex_daemon.clique import Member, field_manager, own_entry_applied

    daemon, me, peer = actors.daemon, actors.node1, actors.node2
    pod = actors.daemon_pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["name"], "uid": pod["uid"]}
    name = constants.clique_object_name(DOMAIN, "uuid.1")

    def apply(node: str, domain: str = DOMAIN, clique_name: str = name) -> dict:
        body = own_entry_applied(clique_name, NS, domain, owner, Member(node, "10.0.0.9", "uuid.1"),
                                 constants.STATUS_NOT_READY)
        return daemon.patch(CLIQUES, clique_name, body, namespace=NS, patch_type="apply",
                            field_manager=field_manager(node), force=True)

    try:
        mine = apply(me)  # creates the clique
        assert [(d["nodeName"], d.get("index")) for d in mine["daemons"]] == [(me, None)]
        assert [r["uid"] for r in mine["metadata"]["ownerReferences"]] == [pod["uid"]]
        raw.update(CLIQUES, {**mine, "daemons": [{**mine["daemons"][0], "index": 0}, entry(peer, 1)]}, NS)
        again = apply(me)  # applied again: the index the controller gave stays, the peer too
        assert [(d["nodeName"], d.get("index")) for d in again["daemons"]] == [(me, 0), (peer, 1)]
        msg = denied(apply, peer)
        assert f"the IMEX daemon on node {me} may change only its own entry ({me})" in msg
        other = constants.clique_object_name(OTHER_DOMAIN, "uuid.1")
        msg = denied(apply, me, OTHER_DOMAIN, other)
        assert f"the IMEX daemon of ComputeDomain {DOMAIN} may write only its own domain's cliques" in msg
        assert raw.get(CLIQUES, name, NS)["daemons"][1] == entry(peer, 1)
    finally:
        raw.delete(CLIQUES, name, NS)


def test_daemon_may_set_only_the_clique_label_of_its_own_pod(raw, actors: Actors) -> None:
    daemon = actors.daemon
    mine, plugin_pod = actors.daemon_pod["metadata"]["name"], actors.plugin_pod["metadata"]["name"]
    pod = daemon.patch(PODS, mine, label_patch(constants.LABEL_CLIQUE_ID, "uuid.1"), namespace=NS)
    assert pod["metadata"]["labels"][constants.LABEL_CLIQUE_ID] == "uuid.1"
    msg = denied(daemon.patch, PODS, plugin_pod, label_patch(constants.LABEL_CLIQUE_ID, "uuid.1"), namespace=NS)
    assert f"the IMEX daemon pod {mine} may update only its own pod" in msg
    denied(daemon.patch, PODS, plugin_pod, {"spec": {"containers": [{"name": "c", "image": "evil"}]}}, namespace=NS)
    msg = denied(daemon.patch, PODS, mine, label_patch("keep", None), namespace=NS)
    assert "may change only its label resource.nvidia.com/computeDomain.cliqueID" in msg
    denied(daemon.patch, PODS, mine, {"spec": {"containers": [{"name": "c", "image": "evil"}]}}, namespace=NS)
    assert raw.get(PODS, plugin_pod, NS)["spec"]["containers"][0]["image"] == "cdriver:test"


def test_daemon_cannot_rewrite_a_domains_status(raw, namespace, actors: Actors) -> None:
    cd = raw.create(RESOURCES["computedomains"], compute_domain("cd", namespace, "t", mode=None), namespace=namespace)
    cd["status"] = {"status": constants.STATUS_READY, "nodes": []}
    denied(actors.daemon.update_status, RESOURCES["computedomains"], cd, namespace=namespace)


def daemon_class_claim(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [
        {"name": "daemon", "exactly": {"deviceClassName": constants.DEVICE_CLASS_DAEMON}}]}}}


def test_namespace_user_cannot_ask_for_the_daemon_device_class(cluster, raw, namespace, actors, tmp_path) -> None:
    """An ordinary user who may create claims in their namespace gets channels, never daemon devices."""
    rbac = "rbac.authorization.k8s.io"
    raw.create(RESOURCES["roles"], {"metadata": {"name": "claims"}, "rules": [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaimtemplates"],
         "verbs": ["create", "get", "list", "delete"]}]}, namespace)
    raw.create(RESOURCES["serviceaccounts"], {"metadata": {"name": "alice"}}, namespace)
    raw.create(RESOURCES["rolebindings"], {"metadata": {"name": "alice"},
                                           "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "claims"},
                                           "subjects": [{"kind": "ServiceAccount", "name": "alice",
                                                         "namespace": namespace}]}, namespace)
    token = raw.create_subresource(RESOURCES["serviceaccounts"], "alice", "token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
        namespace=namespace)["status"]["token"]
    alice = token_client(cluster, tmp_path, "alice", token)
    msg = denied(alice.create, CLAIMS, daemon_class_claim("steal"), namespace)
    assert f"deviceClassName {constants.DEVICE_CLASS_DAEMON} in resourceclaims {namespace}/steal is reserved" in msg
    assert constants.DEVICE_CLASS_DEFAULT_CHANNEL in msg
    first_available = {"metadata": {"name": "steal-2"}, "spec": {"devices": {"requests": [
        {"name": "d", "firstAvailable": [{"name": "a", "deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL},
                                         {"name": "b", "deviceClassName": constants.DEVICE_CLASS_DAEMON}]}]}}}
    denied(alice.create, CLAIMS, first_available, namespace)
    template = {"metadata": {"name": "steal"}, "spec": {"spec": daemon_class_claim("x")["spec"]}}
    msg = denied(alice.create, RCTS, template, namespace)
    assert f"resourceclaimtemplates {namespace}/steal is reserved" in msg
    channel = daemon_class_claim("channel")
    channel["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = constants.DEVICE_CLASS_DEFAULT_CHANNEL
    alice.create(CLAIMS, channel, namespace)
    # The controller's daemon claim templates live in the driver namespace and stay allowed.
    raw.create(RCTS, {"metadata": {"name": "daemon"}, "spec": {"spec": daemon_class_claim("x")["spec"]}}, NS,
               dry_run=True)
    # Nodes, slices and the driver namespace stay out of the user's reach (RBAC).
    user = denied(alice.patch, NODES, actors.node1, label_patch(constants.LABEL_COMPUTE_DOMAIN, DOMAIN))
    assert "forbidden" in user
    denied(alice.create, CLAIMS, daemon_class_claim("steal"), NS)


def test_plugin_may_write_only_its_drivers_device_status_of_claims_on_its_own_node(
        raw, namespace, actors: Actors) -> None:
    """status.devices: the plugin on node 1 reports its own driver's devices of claims allocated there
    (a read-modify-write of the status, as the plugin writes it); another node's claims, another
    driver's entries, and the claim's reservations are refused."""

    def put(claim: dict, entries: list[dict], **extra: Any) -> dict:
        fresh = actors.plugin.get(CLAIMS, claim["metadata"]["name"], namespace)
        fresh["status"] = {**fresh["status"], "devices": entries, **extra}
        return actors.plugin.update_status(CLAIMS, fresh, namespace)

    mine = claim_of_two_drivers(raw, namespace, "on-node1", actors.node1)
    theirs = claim_of_two_drivers(raw, namespace, "on-node2", actors.node2)
    entry = device_status(constants.DRIVER_NAME, actors.node1)
    written = put(mine, [entry])
    assert [(d["driver"], d["conditions"][0]["reason"]) for d in written["status"]["devices"]] == \
        [(constants.DRIVER_NAME, "DaemonReady")]
    assert written["status"]["allocation"] == mine["status"]["allocation"]

    intruder = {"resource": "pods", "name": "intruder", "uid": "00000000-0000-0000-0000-000000000001"}
    refusals = [
        denied(put, theirs, [device_status(constants.DRIVER_NAME, actors.node2)]),
        denied(put, mine, [entry, device_status(OTHER_DRIVER, actors.node1)]),
        denied(put, mine, [entry], reservedFor=[intruder]),
    ]
    # from 1.36 the API server's own checks answer first (the driver's permission, for claims on the
    # plugin's node only; the binding permission for reservations); the admission policy says the
    # same on older servers (test_kube_oldest)
    assert 'resource="resourceclaims/driver", verb="[arbitrary-node:update]"' in refusals[0], refusals[0]
    assert f'{OTHER_DRIVER}" is forbidden' in refusals[1], refusals[1]
    assert 'requires resource="resourceclaims/binding"' in refusals[2], refusals[2]
    record("security", "claim status beyond its node or driver", 3, 3)
    after = raw.get(CLAIMS, "on-node1", namespace)
    assert [d["driver"] for d in after["status"]["devices"]] == [constants.DRIVER_NAME]
    assert not after["status"].get("reservedFor")
    assert not raw.get(CLAIMS, "on-node2", namespace)["status"].get("devices")
