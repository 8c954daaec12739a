"""Read what the chain needs from the API into a snapshot of plain dicts. Read-only: GET and LIST only.

RBAC refusals are recorded per kind (the links that need them say so); an unreachable API
server or a broken kubeconfig raises `CollectError` (exit code 2).
"""

from __future__ import annotations

import datetime as dt
import subprocess
from typing import Any

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.diagnose.snapshot import COMPONENT_CONTROLLER, CRD_NAMES, ENV_IMEX_MODE, LABEL_COMPONENT
from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.kube.objects import name_of, namespace_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES

SOURCES = {
    "deviceclasses": RESOURCES["deviceclasses"],
    "deployments": RESOURCES["deployments"],
    "daemonsets": RESOURCES["daemonsets"],
    "pods": RESOURCES["pods"],
    "nodes": RESOURCES["nodes"],
    "resourceslices": RESOURCES["resourceslices"],
    "computedomains": COMPUTE_DOMAINS,
    "cliques": COMPUTE_DOMAIN_CLIQUES,
    "resourceclaimtemplates": RESOURCES["resourceclaimtemplates"],
    "resourceclaims": RESOURCES["resourceclaims"],
    "events": RESOURCES["events"],
}
CRDS = RESOURCES["customresourcedefinitions"]
EXEC_TIMEOUT = 30.0


class CollectError(CdriverError):
    """The API could not be read at all (connection, credentials): the diagnosis cannot run."""


class Collector:
    """Fills a snapshot dict from the API with the user's credentials."""

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw
        self.data: dict[str, Any] = {"now": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                     "forbidden": {}, "exec": {}}
        self._seen: dict[str, set[str]] = {}

    def _add(self, kind: str, items: list[dict]) -> None:
        seen = self._seen.setdefault(kind, set())
        bucket = self.data.setdefault(kind, [])
        for obj in items:
            key = f"{namespace_of(obj)}/{name_of(obj)}"
            if key not in seen:
                seen.add(key)
                bucket.append(obj)

    def _call(self, kind: str, fn: Any, namespace: str | None = None) -> Any:
        try:
            return fn()
        except ApiError as exc:
            if exc.forbidden:
                self.data["forbidden"].setdefault(kind if namespace is None else f"{kind}/{namespace}",
                                                  exc.message or "forbidden")
                return None
            if exc.not_found:  # e.g. the CRD is not installed: nothing of that kind exists
                return None
            raise CollectError(f"cannot read {kind} from the API server {self.raw.server}: {exc}") from exc
        except OSError as exc:
            raise CollectError(f"cannot reach the API server {self.raw.server}: {exc}") from exc

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        result = self._call(kind, lambda: self.raw.list(SOURCES[kind], namespace, label_selector=label_selector),
                            namespace)
        items = list((result or {}).get("items") or [])
        self._add(kind, items)
        return items

    def collect(self, namespace: str | None, driver_namespace: str | None) -> dict[str, Any]:
        """Everything the chain reads, for one namespace's ComputeDomains (all namespaces if None)."""
        crds = [self._call("crds", lambda n=n: self.raw.get_or_none(CRDS, n)) for n in CRD_NAMES]
        self._add("crds", [c for c in crds if c])
        self.list("deviceclasses")
        selector = f"{LABEL_COMPONENT}={COMPONENT_CONTROLLER}"
        deps = self.list("deployments", None, selector)
        if "deployments" in self.data["forbidden"] and driver_namespace:
            self.data["forbidden"].pop("deployments")
            deps = self.list("deployments", driver_namespace, selector)
        if not driver_namespace:
            controller = next((d for d in deps if any(e.get("name") == ENV_IMEX_MODE for ctr in
                               d["spec"]["template"]["spec"].get("containers") or [] for e in ctr.get("env") or [])),
                              None)
            driver_namespace = namespace_of(controller) or constants.DEFAULT_DRIVER_NAMESPACE
        self.data["driverNamespace"] = driver_namespace
        for kind in ("daemonsets", "pods", "cliques", "events", "resourceclaims"):
            self.list(kind, driver_namespace)
        self.list("nodes")
        self.list("resourceslices")
        cds = self.list("computedomains", namespace)
        namespaces = {namespace} if namespace else {namespace_of(c) for c in cds}
        for ns in sorted(n for n in namespaces if n and n != driver_namespace):
            for kind in ("pods", "resourceclaimtemplates", "resourceclaims", "events"):
                self.list(kind, ns)
        if namespace == driver_namespace:
            self.list("resourceclaimtemplates", namespace)
        for kind in ("crds", *SOURCES):
            self.data.setdefault(kind, [])
        return self.data


def kubectl_exec(kubectl: str, kube_args: list[str], namespace: str, pod: str, container: str,
                 argv: list[str]) -> dict[str, Any]:
    """Run a command in a container with `kubectl exec` (the only way diagnose looks inside one)."""
    cmd = [kubectl, *kube_args, "exec", "-n", namespace, pod, "-c", container, "--", *argv]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=EXEC_TIMEOUT)
    except FileNotFoundError:
        return {"rc": 127, "output": f"{kubectl} not found; pass --kubectl PATH"}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "output": f"kubectl exec timed out after {EXEC_TIMEOUT:.0f} s"}
    return {"rc": out.returncode, "output": (out.stdout + out.stderr)[-2000:]}
