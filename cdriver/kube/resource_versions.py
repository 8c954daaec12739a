"""resource.k8s.io across Kubernetes minors: which version to speak, and the shape changes.

cdriver works with resource.k8s.io/v1 objects everywhere. Kubernetes 1.32 serves only
v1beta1, 1.33 v1beta1 and v1beta2, 1.34 and later v1 (and the betas while they last). The API
client asks the server once which versions it serves, picks the newest it knows, and converts
at the edge with the pure functions here, so no role knows which version is on the wire.

Shape differences from v1 (v1beta2 has none):

* v1beta1 ResourceSlice devices keep everything but the name under ``basic``;
* v1beta1 claim requests hold the single-class request fields directly in the request, where
  v1 nests them under ``exactly``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

GROUP = "resource.k8s.io"
#: Versions cdriver can speak, best first.
SUPPORTED_VERSIONS = ("v1", "v1beta2", "v1beta1")
#: The version every object inside cdriver has.
INTERNAL_VERSION = "v1"
#: Fields of a v1 ``exactly`` request, flat in a v1beta1 request.
EXACT_REQUEST_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess",
                        "tolerations", "capacity")

NOT_SERVED_HINT = (
    "cdriver needs resource.k8s.io (dynamic resource allocation): Kubernetes 1.34 or newer, or "
    "1.32/1.33 with kube-apiserver, kube-controller-manager and kube-scheduler started with "
    "--feature-gates=DynamicResourceAllocation=true and the API server with "
    "--runtime-config=resource.k8s.io/v1beta1=true (1.33: also resource.k8s.io/v1beta2=true)"
)


def choose_version(served: Iterable[str]) -> str | None:
    """The best version of `SUPPORTED_VERSIONS` among `served`, or None when there is none."""
    served = set(served)
    return next((v for v in SUPPORTED_VERSIONS if v in served), None)


def served_versions(api_group: dict) -> list[str]:
    """Version names listed in an ``APIGroup`` discovery document."""
    return [str(v.get("version")) for v in api_group.get("versions") or [] if isinstance(v, dict)]


def to_served(obj: Any, version: str, kind: str) -> Any:
    """A v1 object of `kind` (or a patch body for one) as `version` expects it.

    The input is not changed. List items carry no kind of their own, so the caller says it."""
    return _convert(obj, version, version, kind, _wrap_basic, _flatten_request)


def from_served(obj: Any, version: str, kind: str) -> Any:
    """An object of `kind` read in `version` as the v1 object cdriver works with (input unchanged)."""
    return _convert(obj, version, INTERNAL_VERSION, kind, _unwrap_basic, _nest_request)


def _convert(obj: Any, served: str, target: str, kind: str, device: Callable[[dict], dict],
             request: Callable[[dict], dict]) -> Any:
    """A copy of `obj` labelled `target`, its shape changed by `device`/`request` when `served` is v1beta1."""
    if served == INTERNAL_VERSION or not isinstance(obj, dict):
        return obj
    out = _with_api_version(obj, target)
    if served == "v1beta1":
        _map_shape(out, kind, device, request)
    return out


def _with_api_version(obj: dict, version: str) -> dict:
    out = dict(obj)
    if str(out.get("apiVersion", "")).startswith(GROUP + "/"):
        out["apiVersion"] = f"{GROUP}/{version}"
    return out


def _map_shape(obj: dict, kind: str, device: Callable[[dict], dict],
               request: Callable[[dict], dict]) -> None:
    """Replace `obj`'s spec by a converted copy, by the shape of `kind`."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if kind == "ResourceSlice":
        devices = spec.get("devices")
        if isinstance(devices, list):
            obj["spec"] = {**spec, "devices": [device(d) if isinstance(d, dict) else d for d in devices]}
    elif kind == "ResourceClaimTemplate":
        inner = spec.get("spec")
        if isinstance(inner, dict):
            obj["spec"] = {**spec, "spec": _map_claim_spec(inner, request)}
    elif kind == "ResourceClaim":
        obj["spec"] = _map_claim_spec(spec, request)


def _map_claim_spec(spec: dict, request: Callable[[dict], dict]) -> dict:
    devices = spec.get("devices")
    if not isinstance(devices, dict) or not isinstance(devices.get("requests"), list):
        return spec
    requests = [request(r) if isinstance(r, dict) else r for r in devices["requests"]]
    return {**spec, "devices": {**devices, "requests": requests}}


def _wrap_basic(device: dict) -> dict:
    if "basic" in device:
        return device
    rest = {k: v for k, v in device.items() if k != "name"}
    return {"name": device.get("name"), "basic": rest} if "name" in device else {"basic": rest}


def _unwrap_basic(device: dict) -> dict:
    basic = device.get("basic")
    if not isinstance(basic, dict):
        return device
    return {**{k: v for k, v in device.items() if k != "basic"}, **basic}


def _flatten_request(request: dict) -> dict:
    exactly = request.get("exactly")
    if not isinstance(exactly, dict):
        return request
    return {**{k: v for k, v in request.items() if k != "exactly"}, **exactly}


def _nest_request(request: dict) -> dict:
    exact = {k: request[k] for k in EXACT_REQUEST_FIELDS if k in request}
    if not exact or "exactly" in request:
        return request
    rest = {k: v for k, v in request.items() if k not in EXACT_REQUEST_FIELDS}
    return {**rest, "exactly": exact}
