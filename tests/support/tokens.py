"""Service-account tokens bound to pods (carrying the pod's name and node, as kubelet's do) and
clients that act with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES


def pod_token(raw: RawClient, account: str, pod: dict, namespace: str) -> str:
    """A token of `account` (in `namespace`) bound to `pod`."""
    return raw.create_subresource(RESOURCES["serviceaccounts"], account, "token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}},
        namespace=namespace)["status"]["token"]


def token_client(cluster: Any, tmp_path: Path, name: str, token: str) -> RawClient:
    """A client of `cluster` (a LocalCluster) acting with `token` (its kubeconfig kept in `tmp_path`)."""
    from cdriver.kube.client import new_raw_client

    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": name,
           "clusters": [{"name": "local", "cluster": {"server": cluster.server,
                                                      "certificate-authority": str(cluster.ca_file)}}],
           "users": [{"name": name, "user": {"token": token}}],
           "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}]}
    path = tmp_path / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return new_raw_client(str(path))
