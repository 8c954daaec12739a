"""The catalogue of REST resources the package talks to, by plural.

`Resource` says where one lives (group, version, plural, scope) and builds its URL paths;
`RESOURCES` holds the built-in ones and those registered with `register_resource`
(`cdriver.api.resources` adds the driver's CRDs).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Resource:
    """One REST resource: group ("" = core), version, plural, and whether it is namespaced."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """URL path of the collection, an object or an object's subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            if not name:
                raise ValueError(f"empty object name for {self.plural}")
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


def _r(group: str, version: str, plural: str, namespaced: bool, kind: str) -> Resource:
    return Resource(group, version, plural, namespaced, kind)


RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
        _r("", "v1", "pods", True, "Pod"),
        _r("", "v1", "nodes", False, "Node"),
        _r("", "v1", "namespaces", False, "Namespace"),
        _r("", "v1", "events", True, "Event"),
        _r("", "v1", "serviceaccounts", True, "ServiceAccount"),
        _r("", "v1", "configmaps", True, "ConfigMap"),
        _r("", "v1", "secrets", True, "Secret"),
        _r("", "v1", "services", True, "Service"),
        _r("apps", "v1", "daemonsets", True, "DaemonSet"),
        _r("apps", "v1", "deployments", True, "Deployment"),
        _r("coordination.k8s.io", "v1", "leases", True, "Lease"),
        _r("rbac.authorization.k8s.io", "v1", "roles", True, "Role"),
        _r("rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding"),
        _r("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole"),
        _r("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False,
           "ClusterRoleBinding"),
        _r("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass"),
        _r("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", False,
           "ValidatingAdmissionPolicy"),
        _r("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", False,
           "ValidatingAdmissionPolicyBinding"),
        _r("resource.k8s.io", "v1", "resourceclaims", True, "ResourceClaim"),
        _r("resource.k8s.io", "v1", "resourceclaimtemplates", True, "ResourceClaimTemplate"),
        _r("resource.k8s.io", "v1", "resourceslices", False, "ResourceSlice"),
        _r("resource.k8s.io", "v1", "deviceclasses", False, "DeviceClass"),
        _r("apiextensions.k8s.io", "v1", "customresourcedefinitions", False,
           "CustomResourceDefinition"),
    )
}


def register_resource(resource: Resource) -> Resource:
    """Make a custom resource known by its plural in `RESOURCES`; returns it.

    `cdriver.api.resources` registers the driver's CRDs this way. Registering another
    definition under a plural that is already known raises ValueError.
    """
    known = RESOURCES.setdefault(resource.plural, resource)
    if known != resource:
        raise ValueError(f"resource {resource.plural!r} is already registered as {known}; "
                         f"refusing to replace it with {resource}")
    return resource
