"""`RawClient`: dict-in/dict-out access to any Kubernetes resource, including streaming watches.

Objects stay the JSON the API server sent: no generated models, so fields the client
library does not know survive read-modify-write, and watching ResourceClaims works. What it
acts on is a `cdriver.kube.resources.Resource`; failures raise `cdriver.kube.errors.ApiError`;
`watch` returns a `cdriver.kube.watch.WatchStream`. With a `cdriver.kube.ratelimit.TokenBucket`
every request waits for a token first; a watch takes one when it opens, none per event. With a
`cdriver.kube.metrics.ApiClientMetrics` every request and every wait in the limiter is counted.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

import urllib3

from cdriver.kube import resource_versions
from cdriver.kube.connection import as_connection
from cdriver.kube.errors import ApiError
from cdriver.kube.metrics import ApiClientMetrics, request_verb
from cdriver.kube.objects import meta_of
from cdriver.kube.ratelimit import LONG_WAIT_SECONDS, TokenBucket
from cdriver.kube.resources import Resource
from cdriver.kube.watch import WatchStream
from cdriver.logs import API_REQUESTS_LOGGER

log = logging.getLogger(__name__)
#: One debug line per request (logVerbosity 6): method, path, status, latency.
requests_log = logging.getLogger(API_REQUESTS_LOGGER)

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


def _query(**params: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value)
    return out


def _log_request(method: str, url: str, outcome: str, started: float) -> None:
    """The request's debug line: method, URL, status (or the failure) and milliseconds."""
    if requests_log.isEnabledFor(logging.DEBUG):
        requests_log.debug("%s %s %s in %d ms", method, url, outcome, (time.monotonic() - started) * 1000)


class RawClient:
    """CRUD + watch on raw JSON dicts. Safe to share between threads."""

    def __init__(self, api_client: Any, timeout: tuple[float, float] = DEFAULT_TIMEOUT,
                 rate_limiter: TokenBucket | None = None, metrics: ApiClientMetrics | None = None) -> None:
        """``api_client``: a connection from `cdriver.kube.client.load_api_client`, or a
        `kubernetes.client.ApiClient` (its pool and auth settings are used).
        ``rate_limiter``: the client-side limit of this client's requests (None: none).
        ``metrics``: where requests and rate-limiter waits are counted (None: nowhere)."""
        self.api_client = api_client
        self.rate_limiter = rate_limiter
        self.metrics = metrics
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

    def _throttle(self, method: str, path: str) -> None:
        """Wait for this request's token of the client-side rate limit, if there is one."""
        if self.rate_limiter is None:
            return
        waited = self.rate_limiter.wait()
        if self.metrics is not None:
            self.metrics.rate_limited(waited)
        if waited > LONG_WAIT_SECONDS:
            log.debug("waited %.1fs due to client-side throttling (%s) before %s %s",
                      waited, self.rate_limiter.describe(), method, path)

    def _send(
        self, method: str, path: str, query: dict[str, str] | None, body: Any,
        content_type: str | None, timeout: Any, stream: bool = False, collection: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """One request; ``collection``: a GET of a collection (counted as ``list``)."""
        self._throttle(method, path)
        verb = request_verb(method, query, content_type, collection) if self.metrics is not None else ""
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
        started = time.monotonic()
        try:
            resp = self._pool.request(
                method, url, body=data, headers=headers, timeout=to,
                preload_content=False, retries=False if method != "GET" else None,
            )
        except urllib3.exceptions.HTTPError as exc:
            _log_request(method, url, type(exc).__name__, started)
            if self.metrics is not None:
                self.metrics.request(verb, None)
            raise ApiError(0, type(exc).__name__, f"{method} {path}: {exc}") from exc
        if self.metrics is not None:
            self.metrics.request(verb, resp.status)
        _log_request(method, url, f"{resp.status}{' (stream opened)' if stream and resp.status < 300 else ''}",
                     started)
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
        collection: bool = False,
    ) -> Any:
        """Any request: returns the decoded JSON body, or the text if it is not JSON.
        ``collection``: a GET of a collection (counted as ``list``)."""
        resp = self._send(
            method, path, _query(**(query or {})), body, content_type,
            timeout if timeout is not None else self.timeout, collection=collection,
        )
        raw = resp.data or b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _json(self, method: str, path: str, query: dict[str, str] | None = None,
              body: Any = None, content_type: str | None = None, collection: bool = False) -> dict:
        result = self.request(method, path, query, body, content_type, collection=collection)
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
        result = self._json("GET", wire.path(ns), query, collection=True)
        result.setdefault("items", [])
        if result["items"] is None:
            result["items"] = []
        if limit is None:
            while meta_of(result).get("continue"):
                query["continue"] = result["metadata"]["continue"]
                page = self._json("GET", wire.path(ns), query, collection=True)
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
