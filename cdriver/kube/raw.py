"""Dict-in/dict-out access to any Kubernetes resource, including streaming watches.

Objects stay the JSON the API server sent: no generated models, so fields the client
library does not know survive read-modify-write, and watching ResourceClaims works.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from cdriver.errors import CdriverError
from cdriver.kube import resource_versions
from cdriver.kube.connection import as_connection
from cdriver.kube.objects import meta_of

log = logging.getLogger(__name__)

#: Default (connect, read) timeout of a non-watch request, in seconds.
DEFAULT_TIMEOUT = (10.0, 60.0)
#: Extra seconds a watch read may stay silent beyond its server-side timeoutSeconds.
WATCH_READ_SLACK = 15.0

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


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


class ApiError(CdriverError):
    """An API request failed. ``status`` is the HTTP code (0: no response was received)."""

    def __init__(self, status: int, reason: str, message: str, body: Any = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        super().__init__(f"API error {status} {reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        """An optimistic-concurrency conflict (stale resourceVersion / failed precondition)."""
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        """The requested resourceVersion is too old (relist needed)."""
        return self.status == 410 or self.reason in ("Expired", "Gone")

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def unavailable(self) -> bool:
        """No usable response: connection refused/reset, timeout, or 5xx / 429."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @classmethod
    def from_status(cls, status_obj: dict, http_status: int = 0) -> ApiError:
        """Build from a metav1.Status dict (a response body or a watch ERROR event)."""
        code = status_obj.get("code") or http_status
        return cls(
            int(code), str(status_obj.get("reason") or ""),
            str(status_obj.get("message") or ""), status_obj,
        )


def _query(**params: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value)
    return out


class WatchStream:
    """An iterator of ``(event_type, obj)`` from one watch request.

    Event types: ADDED, MODIFIED, DELETED, BOOKMARK. A server-side ERROR event raises
    `ApiError` (``.gone`` for an expired resourceVersion). `close()` may be called from
    another thread and ends the iteration promptly.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse,
                 convert: Callable[[dict], dict] | None = None) -> None:
        """``convert``: applied to each event's object (e.g. from the served API version)."""
        self._response = response
        self._convert = convert
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._reading = False
        self._finished = False

    def close(self) -> None:
        """End the watch; safe to call from any thread, any number of times."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            reading = self._reading
        try:
            shutdown = getattr(self._response, "shutdown", None)
            if shutdown is not None:
                shutdown()  # unblocks a read in progress in another thread
        except Exception:  # pragma: no cover - best effort
            log.debug("watch shutdown failed", exc_info=True)
        if not reading:
            self._discard()

    def _discard(self) -> None:
        """Drop the connection (it may hold unread data) and hand its pool slot back."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        for step in ("close", "release_conn"):
            try:
                fn = getattr(self._response, step, None)
                if fn is not None:
                    fn()
            except Exception:  # pragma: no cover - best effort
                log.debug("watch %s failed", step, exc_info=True)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        with self._lock:
            if self._closed.is_set() or self._reading:
                return
            self._reading = True
        buffer = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                if self._closed.is_set():
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = self._decode(line)
                    if event is not None:
                        yield self._converted(event)
            if buffer.strip() and not self._closed.is_set():
                event = self._decode(buffer)
                if event is not None:
                    yield self._converted(event)
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError,
                OSError, ValueError) as exc:
            # A read error after close() is the expected way a stopped watch ends; a silent
            # or dropped connection ends the watch too: the caller re-watches.
            if not self._closed.is_set():
                log.debug("watch stream ended: %s", exc)
        finally:
            with self._lock:
                self._reading = False
                self._closed.set()
            self._discard()

    def _converted(self, event: tuple[str, dict]) -> tuple[str, dict]:
        return event if self._convert is None else (event[0], self._convert(event[1]))

    @staticmethod
    def _decode(line: bytes) -> tuple[str, dict] | None:
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise ApiError(0, "BadWatchEvent", f"undecodable watch line: {exc}") from exc
        etype = event.get("type", "")
        obj = event.get("object") or {}
        if etype == "ERROR":
            raise ApiError.from_status(obj, 500)
        return etype, obj


class RawClient:
    """CRUD + watch on raw JSON dicts. Safe to share between threads."""

    def __init__(self, api_client: Any, timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> None:
        """``api_client``: a connection from `cdriver.kube.client.load_api_client`, or a
        `kubernetes.client.ApiClient` (its pool and auth settings are used)."""
        self.api_client = api_client
        self.connection = as_connection(api_client)
        self.timeout = timeout
        self._pool = self.connection.pool
        self._served: dict[str, str] = {}  # API group -> the version spoken with this server
        self._served_lock = threading.Lock()

    @property
    def server(self) -> str:
        return self.connection.host

    # -- low level -------------------------------------------------------------------
    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers: dict[str, str] = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(self.connection.headers())  # User-Agent, (refreshed) credentials
        return headers

    def _send(
        self, method: str, path: str, query: dict[str, str] | None, body: Any,
        content_type: str | None, timeout: Any, stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        url = self.server.rstrip("/") + path
        if query:
            url += "?" + urlencode(query)
        data: bytes | None = None
        if body is not None:
            # Compact JSON: the API server keeps opaque (RawExtension) fields byte for byte, and
            # later patches of e.g. a claim template's opaque config compare those bytes.
            data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
            content_type = content_type or "application/json"
        headers = self._headers(content_type)
        if isinstance(timeout, tuple):
            to = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        elif timeout is None:
            to = urllib3.Timeout(connect=self.timeout[0], read=None)
        else:
            to = urllib3.Timeout(total=timeout)
        try:
            resp = self._pool.request(
                method, url, body=data, headers=headers, timeout=to,
                preload_content=False, retries=False if method != "GET" else None,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, f"{method} {path}: {exc}") from exc
        if resp.status >= 300:
            if resp.status == 401:  # a rotated token: read it again for the next request
                expire = getattr(self.connection, "expire_token", None)
                if expire is not None:
                    expire()
            try:
                raw = resp.data
            except Exception:
                raw = b""
            finally:
                resp.release_conn()
            raise self._error(resp.status, resp.reason or "", raw, method, path)
        if stream:
            return resp
        try:
            _ = resp.data  # read the whole body and keep it on the response
        except urllib3.exceptions.HTTPError as exc:
            resp.release_conn()
            raise ApiError(0, type(exc).__name__, f"{method} {path}: {exc}") from exc
        resp.release_conn()
        return resp

    @staticmethod
    def _error(status: int, reason: str, raw: bytes, method: str, path: str) -> ApiError:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("kind") == "Status":
            err = ApiError.from_status(body, status)
            err.status = status
            return err
        text = raw.decode(errors="replace").strip() if raw else ""
        return ApiError(status, reason, f"{method} {path}: {text or reason}", body)

    def request(
        self, method: str, path: str, query: dict[str, Any] | None = None,
        body: Any = None, content_type: str | None = None, timeout: Any = None,
    ) -> Any:
        """Any request: returns the decoded JSON body, or the text if it is not JSON."""
        resp = self._send(
            method, path, _query(**(query or {})), body, content_type,
            timeout if timeout is not None else self.timeout,
        )
        raw = resp.data or b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _json(self, method: str, path: str, query: dict[str, str] | None = None,
              body: Any = None, content_type: str | None = None) -> dict:
        result = self.request(method, path, query, body, content_type)
        return result if isinstance(result, dict) else {}

    @staticmethod
    def _ns(res: Resource, namespace: str | None, body: dict | None = None) -> str | None:
        if not res.namespaced:
            return None
        ns = namespace or meta_of(body).get("namespace")
        return ns or None

    @staticmethod
    def _require_ns(res: Resource, ns: str | None, op: str) -> None:
        if res.namespaced and not ns:
            raise ValueError(f"{op} {res.plural}: a namespace is required")

    @staticmethod
    def _name_of(body: dict) -> str:
        name = meta_of(body).get("name")
        if not name:
            raise ValueError("object has no metadata.name")
        return str(name)

    # -- resource.k8s.io versions ---------------------------------------------------
    def served_version(self, group: str = resource_versions.GROUP) -> str:
        """The resource.k8s.io version spoken with this server, asked once and remembered."""
        with self._served_lock:
            known = self._served.get(group)
        if known:
            return known
        try:
            doc = self._json("GET", f"/apis/{group}")
        except ApiError as exc:
            if not exc.not_found:
                raise
            doc = {}
        served = resource_versions.served_versions(doc)
        version = resource_versions.choose_version(served)
        if version is None:
            raise ApiError(503, "ResourceAPINotServed",
                           f"the API server at {self.server} serves {group} versions "
                           f"{served or 'none'}, none of {', '.join(resource_versions.SUPPORTED_VERSIONS)}: "
                           + resource_versions.NOT_SERVED_HINT)
        with self._served_lock:
            self._served[group] = version
        if version != resource_versions.INTERNAL_VERSION:
            log.info("the API server serves %s/%s (not %s): converting at the edge", group, version,
                     resource_versions.INTERNAL_VERSION)
        return version

    def on_wire(self, res: Resource) -> Resource:
        """`res` in the version this server serves (resource.k8s.io/v1 may be v1beta1/v1beta2)."""
        if res.group != resource_versions.GROUP or res.version != resource_versions.INTERNAL_VERSION:
            return res
        version = self.served_version(res.group)
        return res if version == res.version else replace(res, version=version)

    @staticmethod
    def _out(wire: Resource, res: Resource, body: Any) -> Any:
        if wire is res:
            return body
        return resource_versions.to_served(body, wire.version, res.kind)

    @staticmethod
    def _in(wire: Resource, res: Resource, obj: Any) -> Any:
        if wire is res:
            return obj
        return resource_versions.from_served(obj, wire.version, res.kind)

    # -- CRUD ------------------------------------------------------------------------
    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict:
        ns = self._ns(res, namespace)
        self._require_ns(res, ns, "get")
        wire = self.on_wire(res)
        return self._in(wire, res, self._json("GET", wire.path(ns, name)))

    def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        """Like `get`, but None when the object does not exist."""
        try:
            return self.get(res, name, namespace)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def list(
        self, res: Resource, namespace: str | None = None,
        label_selector: str | None = None, field_selector: str | None = None,
        resource_version: str | None = None, limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict:
        """The List object (``items`` + ``metadata.resourceVersion``); all namespaces if
        ``namespace`` is None. Without ``limit`` all pages are fetched and merged."""
        ns = self._ns(res, namespace)
        query = _query(
            labelSelector=label_selector, fieldSelector=field_selector,
            resourceVersion=resource_version, limit=limit,
        )
        if continue_token:
            query["continue"] = continue_token
        wire = self.on_wire(res)
        result = self._json("GET", wire.path(ns), query)
        result.setdefault("items", [])
        if result["items"] is None:
            result["items"] = []
        if limit is None:
            while meta_of(result).get("continue"):
                query["continue"] = result["metadata"]["continue"]
                page = self._json("GET", wire.path(ns), query)
                result["items"].extend(page.get("items") or [])
                result["metadata"] = meta_of(page)
        if wire is not res:
            result["items"] = [self._in(wire, res, item) for item in result["items"]]
        return result

    def create(self, res: Resource, body: dict, namespace: str | None = None,
               dry_run: bool = False) -> dict:
        ns = self._ns(res, namespace, body)
        self._require_ns(res, ns, "create")
        wire = self.on_wire(res)
        return self._in(wire, res, self._json(
            "POST", wire.path(ns), _query(dryRun="All" if dry_run else None),
            self._out(wire, res, self._with_type(res, body))))

    def update(self, res: Resource, body: dict, namespace: str | None = None) -> dict:
        """PUT the whole object; include metadata.resourceVersion for a conflict check."""
        ns = self._ns(res, namespace, body)
        self._require_ns(res, ns, "update")
        wire = self.on_wire(res)
        return self._in(wire, res, self._json("PUT", wire.path(ns, self._name_of(body)), None,
                                              self._out(wire, res, self._with_type(res, body))))

    def update_status(self, res: Resource, body: dict, namespace: str | None = None) -> dict:
        """PUT the object's status subresource."""
        ns = self._ns(res, namespace, body)
        self._require_ns(res, ns, "update_status")
        wire = self.on_wire(res)
        return self._in(wire, res, self._json(
            "PUT", wire.path(ns, self._name_of(body), "status"), None,
            self._out(wire, res, self._with_type(res, body))))

    def patch(
        self, res: Resource, name: str, patch: Any, namespace: str | None = None,
        patch_type: str = "merge", subresource: str | None = None,
        field_manager: str | None = None, force: bool = False,
    ) -> dict:
        """PATCH with ``patch_type`` merge | json (a list of ops) | strategic | apply
        (server-side apply; needs ``field_manager``)."""
        if patch_type not in PATCH_CONTENT_TYPES:
            raise ValueError(
                f"patch_type {patch_type!r}: use one of {', '.join(PATCH_CONTENT_TYPES)}"
            )
        if patch_type == "json" and not isinstance(patch, list):
            raise ValueError("a json patch is a list of operations")
        if patch_type == "apply":
            if not field_manager:
                raise ValueError("server-side apply needs field_manager")
            patch = self._with_type(res, patch)
        ns = self._ns(res, namespace)
        self._require_ns(res, ns, "patch")
        query = _query(fieldManager=field_manager, force=True if force else None)
        wire = self.on_wire(res)
        return self._in(wire, res, self._json("PATCH", wire.path(ns, name, subresource), query,
                                              self._out(wire, res, patch), PATCH_CONTENT_TYPES[patch_type]))

    def delete(
        self, res: Resource, name: str, namespace: str | None = None, *,
        propagation_policy: str | None = None, grace_period_seconds: int | None = None,
        precondition_uid: str | None = None,
        precondition_resource_version: str | None = None,
    ) -> dict:
        """DELETE; returns the object (if finalizers delay deletion) or a Status."""
        ns = self._ns(res, namespace)
        self._require_ns(res, ns, "delete")
        wire = self.on_wire(res)
        return self._in(wire, res, self._json("DELETE", wire.path(ns, name), None, self._delete_options(
            propagation_policy, grace_period_seconds, precondition_uid,
            precondition_resource_version)))

    def delete_collection(
        self, res: Resource, namespace: str | None = None,
        label_selector: str | None = None, field_selector: str | None = None,
        propagation_policy: str | None = None,
    ) -> dict:
        ns = self._ns(res, namespace)
        query = _query(labelSelector=label_selector, fieldSelector=field_selector)
        return self._json("DELETE", self.on_wire(res).path(ns), query,
                          self._delete_options(propagation_policy, None, None, None))

    def create_subresource(
        self, res: Resource, name: str, subresource: str, body: dict,
        namespace: str | None = None,
    ) -> dict:
        """POST to a subresource, e.g. ``serviceaccounts/token`` (TokenRequest)."""
        ns = self._ns(res, namespace)
        self._require_ns(res, ns, "create_subresource")
        return self._json("POST", self.on_wire(res).path(ns, name, subresource), None, body)

    def get_subresource(
        self, res: Resource, name: str, subresource: str, namespace: str | None = None,
    ) -> Any:
        """GET a subresource (e.g. ``status``); JSON decoded, or text (``log``)."""
        ns = self._ns(res, namespace)
        self._require_ns(res, ns, "get_subresource")
        return self.request("GET", self.on_wire(res).path(ns, name, subresource))

    # -- watch -----------------------------------------------------------------------
    def watch(
        self, res: Resource, namespace: str | None = None,
        resource_version: str | None = None, label_selector: str | None = None,
        field_selector: str | None = None, timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> WatchStream:
        """Open a watch; iterate the result for ``(event_type, obj)``.

        Raises `ApiError` (``.gone`` when ``resource_version`` is too old) on open or
        from the iteration. The stream ends when the server closes it (after
        ``timeout_seconds``) or on `WatchStream.close()`.
        """
        ns = self._ns(res, namespace)
        query = _query(
            watch=True, resourceVersion=resource_version, labelSelector=label_selector,
            fieldSelector=field_selector, timeoutSeconds=timeout_seconds,
            allowWatchBookmarks=True if allow_bookmarks else None,
        )
        read = None if timeout_seconds is None else float(timeout_seconds) + WATCH_READ_SLACK
        wire = self.on_wire(res)
        resp = self._send("GET", wire.path(ns), query, None, None,
                          (self.timeout[0], read) if read else None, stream=True)
        if wire is res:
            return WatchStream(resp)
        return WatchStream(resp, lambda obj: self._in(wire, res, obj))

    # -- helpers ---------------------------------------------------------------------
    @staticmethod
    def _with_type(res: Resource, body: dict) -> dict:
        if res.kind and ("kind" not in body or "apiVersion" not in body):
            body = dict(body)
            body.setdefault("apiVersion", res.api_version)
            body.setdefault("kind", res.kind)
        return body

    @staticmethod
    def _delete_options(
        propagation_policy: str | None, grace_period_seconds: int | None,
        uid: str | None, resource_version: str | None,
    ) -> dict | None:
        opts: dict[str, Any] = {}
        if propagation_policy:
            opts["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            opts["gracePeriodSeconds"] = grace_period_seconds
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            opts["preconditions"] = pre
        if not opts:
            return None
        return {"apiVersion": "v1", "kind": "DeleteOptions", **opts}


def object_key(obj: dict) -> str:
    """Cache key ``namespace/name`` (just ``name`` for cluster-scoped objects)."""
    meta = meta_of(obj)
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))
