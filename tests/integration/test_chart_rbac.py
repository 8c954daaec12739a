"""The chart's RBAC on the real API server: each role may do what its code does, and no more.

The chart's service accounts, Roles and bindings are rendered with helm and applied; each
role then acts with a token of its own service account. (The end-to-end tests run every role
in pods under exactly these accounts as well.)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cdriver.api.constants import (
    API_VERSION,
    DAEMON_SERVICE_ACCOUNT,
    GROUP,
    KIND_COMPUTE_DOMAIN,
    KIND_COMPUTE_DOMAIN_CLIQUE,
)
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.kube.raw import RESOURCES, ApiError

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "helm" / "cdriver"
NS = "rbac-proof"
RELEASE = "proof"
ACCOUNTS = {
    "controller": f"{RELEASE}-cdriver-controller",
    "plugin": f"{RELEASE}-cdriver-kubeletplugin",
    "daemon": DAEMON_SERVICE_ACCOUNT,
}

# (verb, group, resource, subresource, namespaced-in-driver-ns) each role's code uses.
USES = {
    "controller": [
        ("watch", GROUP, "computedomains", "", False), ("update", GROUP, "computedomains", "", False),
        ("update", GROUP, "computedomains", "status", False),
        ("create", "resource.k8s.io", "resourceclaimtemplates", "", False),
        ("delete", "resource.k8s.io", "resourceclaimtemplates", "", False),
        ("create", "apps", "daemonsets", "", True), ("delete", "apps", "daemonsets", "", True),
        ("watch", GROUP, "computedomaincliques", "", True), ("update", GROUP, "computedomaincliques", "", True),
        ("patch", "", "nodes", "", False), ("watch", "", "pods", "", False), ("create", "", "events", "", False),
        ("update", "coordination.k8s.io", "leases", "", True),
    ],
    "plugin": [
        ("get", GROUP, "computedomains", "", False), ("watch", GROUP, "computedomaincliques", "", True),
        ("get", "resource.k8s.io", "resourceclaims", "", False),
        ("create", "resource.k8s.io", "resourceslices", "", False),
        ("delete", "resource.k8s.io", "resourceslices", "", False),
        ("patch", "", "nodes", "", False), ("create", "", "events", "", False),
    ],
    "daemon": [
        ("create", GROUP, "computedomaincliques", "", True), ("update", GROUP, "computedomaincliques", "", True),
        ("watch", "", "pods", "", True), ("patch", "", "pods", "", True), ("get", GROUP, "computedomains", "", False),
        ("update", GROUP, "computedomains", "status", False), ("create", "", "events", "", True),
    ],
}


@pytest.fixture(scope="module")
def tokens(cluster, raw, chart_crds, tmp_path_factory) -> Iterator[dict[str, Path]]:
    """Apply the chart's RBAC objects; return a token kubeconfig per role."""
    from cdriver.sim.controlplane.binaries import helm_binary

    out = subprocess.run([str(helm_binary(echo=False)), "template", RELEASE, str(CHART), "--namespace", NS,
                          "--kube-version", "1.37.2", "-s", "templates/rbac-controller.yaml",
                          "-s", "templates/rbac-kubeletplugin.yaml", "-s", "templates/rbac-daemon.yaml"],
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
    cd = raw.create(COMPUTE_DOMAINS, {
        "apiVersion": API_VERSION, "kind": KIND_COMPUTE_DOMAIN, "metadata": {"name": "cd"},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}}}, namespace=namespace)
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
