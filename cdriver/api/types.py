"""ComputeDomain, ComputeDomainClique and the opaque device configs, decoded strictly.

Decoding rejects unknown fields and wrong types with a message naming the field path.
Objects keep the dict they came from (``raw``) so writing back loses nothing.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from cdriver.api import constants
from cdriver.decoding import is_integer, short, unknown_field, unknown_fields, wrong_type
from cdriver.errors import CdriverError
from cdriver.kube.objects import meta_of

#: Longest domainID accepted: the limit of a Kubernetes label value.
MAX_DOMAIN_ID_LEN = 63
#: Largest spec.numNodes: the largest cluster Kubernetes supports (the CRD says the same).
MAX_NUM_NODES = 5000
#: A ResourceClaimTemplate name: a lowercase RFC 1123 subdomain (the CRD's pattern).
MAX_OBJECT_NAME_LEN = 253
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_STATUSES = (constants.STATUS_READY, constants.STATUS_NOT_READY)
_OBJECT_KEYS = ("apiVersion", "kind", "metadata")


class ValidationError(CdriverError):
    """Input does not match the API schema; the message names the field and the fix."""


class UnknownFieldError(ValidationError):
    """Fields the schema does not know: the message explains the first, ``paths`` names them all."""

    def __init__(self, message: str, paths: tuple[str, ...]) -> None:
        super().__init__(message)
        self.paths = paths


# --- strict decoding helpers ----------------------------------------------------------
class _Reader:
    """Typed, strict access to one JSON object at a field path."""

    def __init__(self, where: str, obj: Any, path: str, allowed: tuple[str, ...]) -> None:
        self.where = where
        self.path = path
        if not isinstance(obj, dict):
            self.fail("", wrong_type("an object", obj))
        unknown = unknown_fields(obj, allowed)
        if unknown:
            raise UnknownFieldError(
                f"{where}: field {self.full(unknown[0])}: {unknown_field(unknown[0], allowed)}",
                tuple(self.full(k) for k in unknown),
            )
        self.obj: dict = obj

    def full(self, key: str) -> str:
        if not key:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str, problem: str) -> None:
        raise ValidationError(f"{self.where}: field {self.full(key)}: {problem}")

    def string(self, key: str, required: bool = False, default: str = "") -> str:
        if key not in self.obj or self.obj[key] is None:
            if required:
                self.fail(key, "is required")
            return default
        value = self.obj[key]
        if not isinstance(value, str):
            self.fail(key, wrong_type("a string", value))
        if required and not value:
            self.fail(key, "must not be empty")
        return value

    def integer(self, key: str, default: int = 0, minimum: int | None = None,
                maximum: int | None = None, why_maximum: str = "") -> int:
        if key not in self.obj or self.obj[key] is None:
            return default
        value = self.obj[key]
        if not is_integer(value):
            self.fail(key, wrong_type("an integer", value))
        if minimum is not None and value < minimum:
            self.fail(key, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(key, f"must be <= {maximum}{why_maximum}, got {value}")
        return value

    def object_name(self, key: str) -> str:
        """A required Kubernetes object name (lowercase RFC 1123 subdomain)."""
        value = self.string(key, required=True)
        if len(value) > MAX_OBJECT_NAME_LEN:
            self.fail(key, f"{len(value)} characters, more than the {MAX_OBJECT_NAME_LEN} a Kubernetes object "
                           "name may have; choose a shorter name")
        if not _DNS_SUBDOMAIN_RE.match(value):
            self.fail(key, f"{short(value)} is not a valid Kubernetes object name: use lowercase letters, "
                           "digits, '-' and '.', starting and ending with a letter or digit")
        return value

    def enum(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.string(key, default=default)
        if value == "":
            return default
        if value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {short(value)}")
        return value

    def obj_at(self, key: str, allowed: tuple[str, ...], required: bool = False) -> _Reader:
        if key not in self.obj or self.obj[key] is None:
            if required:
                self.fail(key, "is required")
            return _Reader(self.where, {}, self.full(key), allowed)
        return _Reader(self.where, self.obj[key], self.full(key), allowed)

    def list_at(self, key: str) -> list:
        if key not in self.obj or self.obj[key] is None:
            return []
        value = self.obj[key]
        if not isinstance(value, list):
            self.fail(key, wrong_type("a list", value))
        return value

    def meta(self) -> dict:
        value = self.obj.get("metadata")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("metadata", wrong_type("an object", value))
        return value


def _where(kind: str, obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict) and meta.get("name"):
        ns = meta.get("namespace")
        return f"{kind} {ns}/{meta['name']}" if ns else f"{kind} {meta['name']}"
    return kind


def _check_type_meta(r: _Reader, kind: str) -> None:
    api_version = r.string("apiVersion")
    if api_version and api_version != constants.API_VERSION:
        r.fail("apiVersion", f"must be {constants.API_VERSION}, got {short(api_version)}")
    got_kind = r.string("kind")
    if got_kind and got_kind != kind:
        r.fail("kind", f"must be {kind}, got {short(got_kind)}")


# --- domainID ------------------------------------------------------------------------
def validate_domain_id(value: Any, field_name: str = "domainID") -> str:
    """Return ``value`` if it is usable as a directory name and a label value, else raise.

    Rules: a non-empty string of at most 63 characters from ``[A-Za-z0-9-_.]``, starting
    and ending with a letter or digit, without ``..`` (so never a path traversal).
    """
    fix = "use the ComputeDomain's metadata.uid (the controller writes it for you)"
    if not isinstance(value, str):
        raise ValidationError(f"field {field_name}: {wrong_type('a string', value)}")
    if not value:
        raise ValidationError(f"field {field_name}: must not be empty; {fix}")
    if len(value) > MAX_DOMAIN_ID_LEN:
        raise ValidationError(
            f"field {field_name}: {len(value)} characters, at most {MAX_DOMAIN_ID_LEN} "
            f"allowed (value starts {short(value[:20])}); {fix}"
        )
    if "/" in value or "\\" in value or ".." in value or "\0" in value:
        raise ValidationError(
            f"field {field_name}: {short(value)} is not a safe path component "
            f"(no '/', '\\', '..'); {fix}"
        )
    if not _LABEL_VALUE_RE.match(value):
        raise ValidationError(
            f"field {field_name}: {short(value)} is not a valid label value (letters, "
            f"digits, '-', '_', '.', starting and ending with a letter or digit); {fix}"
        )
    return value


# --- ComputeDomain -------------------------------------------------------------------
@dataclass
class NodeStatus:
    """One ``status.nodes[]`` entry: a node running this domain's IMEX daemon."""

    name: str
    ip_address: str
    clique_id: str
    index: int = 0
    status: str = constants.STATUS_NOT_READY

    _FIELDS = ("name", "ipAddress", "cliqueID", "index", "status")

    @classmethod
    def _read(cls, r: _Reader) -> NodeStatus:
        return cls(
            name=r.string("name", required=True),
            ip_address=r.string("ipAddress"),
            clique_id=r.string("cliqueID"),
            # -1: a node without NVLink fabric (no clique, no IMEX index).
            index=r.integer("index", minimum=-1),
            status=r.enum("status", _STATUSES, constants.STATUS_NOT_READY),
        )

    @classmethod
    def from_dict(cls, obj: Any, where: str = "ComputeDomain node status") -> NodeStatus:
        return cls._read(_Reader(where, obj, "", cls._FIELDS))

    def to_dict(self) -> dict:
        return {"name": self.name, "ipAddress": self.ip_address, "cliqueID": self.clique_id,
                "index": self.index, "status": self.status}


@dataclass
class ComputeDomain:
    """A decoded ComputeDomain. ``status`` is ``""`` until the controller first writes it."""

    name: str
    namespace: str
    uid: str
    num_nodes: int
    channel_template_name: str
    allocation_mode: str
    status: str
    nodes: list[NodeStatus]
    raw: dict = field(repr=False)

    @classmethod
    def from_dict(cls, obj: Any) -> ComputeDomain:
        where = _where(constants.KIND_COMPUTE_DOMAIN, obj)
        r = _Reader(where, obj, "", (*_OBJECT_KEYS, "spec", "status"))
        _check_type_meta(r, constants.KIND_COMPUTE_DOMAIN)
        meta = r.meta()
        spec = r.obj_at("spec", ("numNodes", "channel"), required=True)
        channel = spec.obj_at("channel", ("resourceClaimTemplate", "allocationMode"),
                              required=True)
        template = channel.obj_at("resourceClaimTemplate", ("name",), required=True)
        status = r.obj_at("status", ("status", "nodes", "readyNodes", "conditions"))
        nodes = []
        for i, entry in enumerate(status.list_at("nodes")):
            nodes.append(NodeStatus._read(
                _Reader(where, entry, f"status.nodes[{i}]", NodeStatus._FIELDS)))
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            num_nodes=spec.integer("numNodes", minimum=0, maximum=MAX_NUM_NODES,
                                   why_maximum=" (the largest cluster Kubernetes supports; 0 is usual)"),
            channel_template_name=template.object_name("name"),
            allocation_mode=channel.enum("allocationMode", constants.ALLOCATION_MODES,
                                         constants.ALLOCATION_MODE_SINGLE),
            status=status.enum("status", _STATUSES, "") if status.obj.get("status") else "",
            nodes=nodes,
            raw=obj,
        )

    @property
    def metadata(self) -> dict:
        return meta_of(self.raw)

    @property
    def deleting(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def finalizers(self) -> list[str]:
        return list(self.metadata.get("finalizers") or [])

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion") or "")

    def status_dict(self) -> dict:
        """The ``status`` object as it should be written back."""
        out: dict[str, Any] = {"status": self.status or constants.STATUS_NOT_READY}
        if self.nodes:
            out["nodes"] = [n.to_dict() for n in self.nodes]
        # Fields the controller owns are carried through unchanged.
        previous = self.raw.get("status") or {}
        for key in ("readyNodes", "conditions"):
            if key in previous:
                out[key] = copy.deepcopy(previous[key])
        return out

    def to_dict(self) -> dict:
        """The original object with ``status`` replaced by the current fields."""
        obj = copy.deepcopy(self.raw)
        obj["status"] = self.status_dict()
        return obj


# --- ComputeDomainClique -------------------------------------------------------------
@dataclass
class CliqueDaemon:
    """One ``daemons[]`` entry of a ComputeDomainClique."""

    node_name: str
    ip_address: str
    clique_id: str
    index: int = 0
    status: str = constants.STATUS_NOT_READY

    _FIELDS = ("nodeName", "ipAddress", "cliqueID", "index", "status")

    @classmethod
    def _read(cls, r: _Reader) -> CliqueDaemon:
        return cls(
            node_name=r.string("nodeName", required=True),
            ip_address=r.string("ipAddress"),
            clique_id=r.string("cliqueID"),
            index=r.integer("index", minimum=0),
            status=r.enum("status", _STATUSES, constants.STATUS_NOT_READY),
        )

    @classmethod
    def from_dict(cls, obj: Any, where: str = "ComputeDomainClique daemon") -> CliqueDaemon:
        return cls._read(_Reader(where, obj, "", cls._FIELDS))

    def to_dict(self) -> dict:
        return {"nodeName": self.node_name, "ipAddress": self.ip_address,
                "cliqueID": self.clique_id, "index": self.index, "status": self.status}


@dataclass
class ComputeDomainClique:
    """A decoded ComputeDomainClique (named ``<cdUID>.<cliqueID>``, in the driver namespace)."""

    name: str
    namespace: str
    daemons: list[CliqueDaemon]
    raw: dict = field(repr=False)

    @classmethod
    def from_dict(cls, obj: Any) -> ComputeDomainClique:
        where = _where(constants.KIND_COMPUTE_DOMAIN_CLIQUE, obj)
        r = _Reader(where, obj, "", (*_OBJECT_KEYS, "daemons"))
        _check_type_meta(r, constants.KIND_COMPUTE_DOMAIN_CLIQUE)
        meta = r.meta()
        daemons = [
            CliqueDaemon._read(_Reader(where, entry, f"daemons[{i}]", CliqueDaemon._FIELDS))
            for i, entry in enumerate(r.list_at("daemons"))
        ]
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            daemons=daemons,
            raw=obj,
        )

    @property
    def metadata(self) -> dict:
        return meta_of(self.raw)

    def daemon(self, node_name: str) -> CliqueDaemon | None:
        for d in self.daemons:
            if d.node_name == node_name:
                return d
        return None

    def to_dict(self) -> dict:
        """The original object with ``daemons`` replaced by the current entries."""
        obj = copy.deepcopy(self.raw)
        obj.setdefault("apiVersion", constants.API_VERSION)
        obj.setdefault("kind", constants.KIND_COMPUTE_DOMAIN_CLIQUE)
        if self.daemons:
            obj["daemons"] = [d.to_dict() for d in self.daemons]
        else:
            obj.pop("daemons", None)
        return obj


# --- opaque device configs -------------------------------------------------------------
@dataclass(frozen=True)
class ChannelConfig:
    """``ComputeDomainChannelConfig``: the workload side of a domain."""

    domain_id: str
    allocation_mode: str = constants.ALLOCATION_MODE_SINGLE

    @property
    def all_channels(self) -> bool:
        return self.allocation_mode == constants.ALLOCATION_MODE_ALL

    def to_dict(self) -> dict:
        return {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG,
                "domainID": self.domain_id, "allocationMode": self.allocation_mode}


@dataclass(frozen=True)
class DaemonConfig:
    """``ComputeDomainDaemonConfig``: the IMEX daemon side of a domain."""

    domain_id: str

    def to_dict(self) -> dict:
        return {"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG,
                "domainID": self.domain_id}


def decode_opaque_config(params: Any) -> ChannelConfig | DaemonConfig:
    """Decode ``devices.config[].opaque.parameters`` strictly (kind decides the type)."""
    where = "opaque device config"
    if not isinstance(params, dict):
        raise ValidationError(
            f"{where}: {wrong_type('an object with apiVersion, kind and domainID', params)}"
        )
    kind = params.get("kind")
    kinds = (constants.KIND_CHANNEL_CONFIG, constants.KIND_DAEMON_CONFIG)
    if kind not in kinds:
        raise ValidationError(
            f"{where}: field kind: must be one of {', '.join(kinds)}, got {short(kind)}"
        )
    where = f"{kind}"
    if kind == constants.KIND_CHANNEL_CONFIG:
        r = _Reader(where, params, "", ("apiVersion", "kind", "domainID", "allocationMode"))
    else:
        r = _Reader(where, params, "", ("apiVersion", "kind", "domainID"))
    api_version = r.string("apiVersion", required=True)
    if api_version != constants.API_VERSION:
        r.fail("apiVersion", f"must be {constants.API_VERSION}, got {short(api_version)}")
    domain_id = r.string("domainID", required=True)
    try:
        validate_domain_id(domain_id)
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from None
    if kind == constants.KIND_DAEMON_CONFIG:
        return DaemonConfig(domain_id=domain_id)
    return ChannelConfig(
        domain_id=domain_id,
        allocation_mode=r.enum("allocationMode", constants.ALLOCATION_MODES, constants.ALLOCATION_MODE_SINGLE),
    )
