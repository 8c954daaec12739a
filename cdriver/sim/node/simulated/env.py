"""A container's environment as kubelet builds it (pure; lookups are passed in).

Covers `env` (values with `$(VAR)` expansion, downward-API `fieldRef`/`resourceFieldRef`,
`configMapKeyRef`, `secretKeyRef`), `envFrom` (configMaps/secrets with prefix), service
links for the namespace's Services, and the `kubernetes` Service pointing at the real API
server address so in-cluster configuration works on a simulated node.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from cdriver.errors import CdriverError
from cdriver.kube.objects import meta_of, name_of

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Lookup = Callable[[str, str], "dict[str, Any] | None"]


class EnvError(CdriverError):
    """The environment cannot be built (missing ConfigMap/Secret/key, bad reference)."""


@dataclass
class EnvContext:
    """What a container's environment may refer to besides its pod."""

    node_name: str
    host_ip: str
    pod_ip: str
    api_host: str
    api_port: int
    node_allocatable: dict[str, str] = field(default_factory=dict)
    services: list[dict[str, Any]] = field(default_factory=list)
    get_configmap: Lookup = lambda ns, name: None
    get_secret: Lookup = lambda ns, name: None
    path_prefix: list[str] = field(default_factory=list)


# --- $(VAR) expansion -----------------------------------------------------------------

def expand(text: str, mapping: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, `$$` escapes a `$`,
    unknown references stay as written."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end < 0:
                    out.append(text[i:])
                    break
                name = text[i + 2:end]
                out.append(mapping[name] if name in mapping else text[i:end + 1])
                i = end + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


# --- downward API -----------------------------------------------------------------------

_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")


def format_map(values: Mapping[str, str]) -> str:
    """A labels/annotations map as the downward API writes it (`k="v"` lines, sorted)."""
    return "\n".join(f'{k}="{_quote(v)}"' for k, v in sorted(values.items()))


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def field_value(pod: dict[str, Any], path: str, host_ip: str, pod_ip: str) -> str:
    """The value of a downward-API `fieldRef.fieldPath` for `pod`."""
    meta = meta_of(pod)
    spec = pod.get("spec") or {}
    match = _SUBSCRIPT.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "metadata.labels": format_map(meta.get("labels") or {}),
        "metadata.annotations": format_map(meta.get("annotations") or {}),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path not in simple:
        raise EnvError(f"fieldRef.fieldPath {path!r} is not supported; use one of "
                       f"{', '.join(sorted(simple))} or metadata.labels['<key>']")
    return str(simple[path] or "")


def resource_value(container: dict[str, Any], resource: str, divisor: str | None,
                   allocatable: Mapping[str, str]) -> str:
    """`resourceFieldRef`: the container's limit/request (limits default to node allocatable),
    divided by `divisor` and rounded up, as kubelet reports it."""
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise EnvError(f"resourceFieldRef.resource {resource!r} is invalid; use e.g. limits.cpu or "
                       "requests.memory")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = allocatable.get(name, "0") if kind == "limits" else "0"
    try:
        quantity = Decimal(parse_quantity(value))
        div = Decimal(parse_quantity(divisor or "1"))
    except ValueError as exc:
        raise EnvError(f"resourceFieldRef {resource}: {exc}") from None
    if div <= 0:
        raise EnvError(f"resourceFieldRef {resource}: divisor {divisor!r} must be positive")
    return str(math.ceil(quantity / div))


# --- ConfigMaps and Secrets -------------------------------------------------------------

def object_data(obj: dict[str, Any], secret: bool) -> dict[str, bytes]:
    """Key -> bytes of a ConfigMap (data + binaryData) or Secret (base64 data + stringData)."""
    out: dict[str, bytes] = {}
    if secret:
        for key, value in (obj.get("data") or {}).items():
            out[key] = base64.b64decode(value or "")
        for key, value in (obj.get("stringData") or {}).items():
            out[key] = str(value).encode()
        return out
    for key, value in (obj.get("binaryData") or {}).items():
        out[key] = base64.b64decode(value or "")
    for key, value in (obj.get("data") or {}).items():
        out[key] = str(value).encode()
    return out


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="surrogateescape")


def _key_ref(ref: dict[str, Any], kind: str, namespace: str, ctx: EnvContext) -> str | None:
    name, key = ref.get("name", ""), ref.get("key", "")
    optional = bool(ref.get("optional"))
    secret = kind == "Secret"
    obj = (ctx.get_secret if secret else ctx.get_configmap)(namespace, name)
    if obj is None:
        if optional:
            return None
        raise EnvError(f"{kind.lower()} \"{name}\" not found in namespace {namespace}; create it or "
                       "mark the reference optional")
    data = object_data(obj, secret)
    if key not in data:
        if optional:
            return None
        raise EnvError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return _text(data[key])


# --- service links ----------------------------------------------------------------------

def _env_name(service_name: str) -> str:
    return service_name.upper().replace("-", "_")


def service_env(services: list[dict[str, Any]], api_host: str, api_port: int) -> dict[str, str]:
    """`<NAME>_SERVICE_HOST/_PORT` and docker-link style variables; the `kubernetes` Service is
    the real API server address (its cluster IP is not routable on a simulated node)."""
    env: dict[str, str] = {}
    for svc in sorted(services, key=name_of):
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        _add_service(env, _env_name(svc["metadata"]["name"]), ip, ports)
    kube_ports = [{"name": "https", "port": api_port, "protocol": "TCP"}]
    _add_service(env, "KUBERNETES", api_host, kube_ports)
    return env


def _add_service(env: dict[str, str], prefix: str, ip: str, ports: list[dict[str, Any]]) -> None:
    first = ports[0]
    env[f"{prefix}_SERVICE_HOST"] = ip
    env[f"{prefix}_SERVICE_PORT"] = str(first.get("port"))
    for port in ports:
        if port.get("name"):
            env[f"{prefix}_SERVICE_PORT_{_env_name(port['name'])}"] = str(port.get("port"))
    proto = str(first.get("protocol") or "TCP").lower()
    env[f"{prefix}_PORT"] = f"{proto}://{ip}:{first.get('port')}"
    for port in ports:
        p, pr = port.get("port"), str(port.get("protocol") or "TCP")
        base = f"{prefix}_PORT_{p}_{pr.upper()}"
        env[base] = f"{pr.lower()}://{ip}:{p}"
        env[f"{base}_PROTO"] = pr.lower()
        env[f"{base}_PORT"] = str(p)
        env[f"{base}_ADDR"] = ip


# --- the whole environment ----------------------------------------------------------------

def container_env(pod: dict[str, Any], container: dict[str, Any], ctx: EnvContext) -> dict[str, str]:
    """The environment of `container`: kubelet's order (envFrom, then env with expansion,
    then service links where not set), plus PATH/HOSTNAME/HOME defaults."""
    meta = meta_of(pod)
    spec = pod.get("spec") or {}
    namespace = meta.get("namespace", "default")
    services = ctx.services if spec.get("enableServiceLinks", True) else []
    svc_env = service_env(services, ctx.api_host, ctx.api_port)
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            lookup = ctx.get_secret if kind == "Secret" else ctx.get_configmap
            obj = lookup(namespace, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f"{kind.lower()} \"{ref.get('name', '')}\" not found in namespace "
                               f"{namespace} (envFrom); create it or mark it optional")
            for k, v in object_data(obj, kind == "Secret").items():
                if k and "=" not in k:
                    env[prefix + k] = _text(v)
    for var in container.get("env") or []:
        name = var.get("name", "")
        if "value" in var or "valueFrom" not in var:
            env[name] = expand(str(var.get("value") or ""), {**svc_env, **env})
            continue
        source = var["valueFrom"] or {}
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"].get("fieldPath", ""), ctx.host_ip, ctx.pod_ip)
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            env[name] = resource_value(container, ref.get("resource", ""), ref.get("divisor"),
                                       ctx.node_allocatable)
        elif "configMapKeyRef" in source:
            value = _key_ref(source["configMapKeyRef"], "ConfigMap", namespace, ctx)
            if value is not None:
                env[name] = value
        elif "secretKeyRef" in source:
            value = _key_ref(source["secretKeyRef"], "Secret", namespace, ctx)
            if value is not None:
                env[name] = value
        else:
            raise EnvError(f"env {name}: valueFrom source {sorted(source)} is not supported")
    for key, value in svc_env.items():
        env.setdefault(key, value)
    hostname = spec.get("hostname") or meta.get("name", "")
    if spec.get("hostNetwork"):
        hostname = ctx.node_name
    env.setdefault("HOSTNAME", hostname)
    env.setdefault("HOME", "/root")
    path = env.get("PATH") or DEFAULT_PATH
    env["PATH"] = ":".join([*ctx.path_prefix, path]) if ctx.path_prefix else path
    return env


def probe_command(container: dict[str, Any], command: list[Any]) -> list[str]:
    """An exec probe's command with `$(VAR)` expanded as kubelet does it: from the container's
    static `env` values only (no valueFrom, no envFrom, no service links)."""
    static = {var.get("name", ""): str(var.get("value") or "") for var in container.get("env") or []
              if "valueFrom" not in var}
    return [expand(str(arg), static) for arg in command]


def command_line(container: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with `$(VAR)` expanded; images are not run, so a command is required."""
    command = [expand(str(a), env) for a in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    if not command:
        raise EnvError(f"container {container.get('name', '')!r} has no command: simulated nodes do not "
                       "run images' entrypoints; set `command` (the image is ignored)")
    return command + args
