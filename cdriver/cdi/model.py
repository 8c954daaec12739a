"""CDI spec model: validated dataclasses, strict decoding, minimal ``cdiVersion`` selection.

Covers the CDI features cdriver emits and the simulated runtime applies: env, device nodes,
mounts and annotations, and decodes hooks (which other drivers' specs carry; the simulated
runtime names and skips them). Other valid CDI edits (netDevices, intelRdt, additionalGids) are
rejected by name when decoding, since nothing here could apply them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cdriver.decoding import is_integer, short, type_name, unknown_field, wrong_type
from cdriver.errors import CdriverError

CDI_DYNAMIC_DIR = "/var/run/cdi"
CDI_STATIC_DIR = "/etc/cdi"

# Every released spec version, oldest first; files may carry any of them.
CDI_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
# The oldest version we emit (what the CDI library treats as the earliest supported one).
EARLIEST_VERSION = "0.3.0"

MAX_NAME_LENGTH = 253  # cdriver's bound on vendor, class and device names (CDI sets none)
DEVICE_NODE_TYPES = ("", "b", "c", "u", "p")
PERMISSION_LETTERS = frozenset("rwm")

_VENDOR_OR_CLASS = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_UNSUPPORTED_EDITS = ("netDevices", "intelRdt", "additionalGids")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")


class CDIError(CdriverError):
    """Invalid CDI name, spec or file; the message names the field or file and the fix."""


# --- names ------------------------------------------------------------------------------


def _check_name(what: str, value: object, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str) or not value:
        raise CDIError(f"CDI {what} must be a non-empty string, got {short(value)}")
    if len(value) > MAX_NAME_LENGTH:
        raise CDIError(f"CDI {what} {short(value)} is too long; the limit is {MAX_NAME_LENGTH} characters")
    if not pattern.fullmatch(value):
        raise CDIError(f"CDI {what} {value!r} is invalid: {rule}")
    return value


def validate_vendor(vendor: object) -> str:
    return _check_name(
        "vendor",
        vendor,
        _VENDOR_OR_CLASS,
        "start with a letter, end with a letter or digit, use only letters, digits, '_', '-', '.'",
    )


def validate_class(class_name: object) -> str:
    return _check_name(
        "class",
        class_name,
        _VENDOR_OR_CLASS,
        "start with a letter, end with a letter or digit, use only letters, digits, '_', '-', '.'",
    )


def validate_device_name(name: object) -> str:
    return _check_name(
        "device name",
        name,
        _DEVICE_NAME,
        "start and end with a letter or digit, use only letters, digits, '_', '-', '.', ':'",
    )


def parse_kind(kind: object) -> tuple[str, str]:
    """Split and validate ``vendor/class``."""
    if not isinstance(kind, str) or kind.count("/") != 1:
        raise CDIError(f"CDI kind {short(kind)} is invalid: expected '<vendor>/<class>', e.g. 'example.com/device'")
    vendor, class_name = kind.split("/")
    return validate_vendor(vendor), validate_class(class_name)


def qualified_name(kind: str, name: str) -> str:
    """The fully qualified device ID ``vendor/class=name`` handed to the runtime."""
    parse_kind(kind)
    return f"{kind}={validate_device_name(name)}"


def parse_qualified_name(device_id: object) -> tuple[str, str]:
    """Split ``vendor/class=name`` into (kind, name), validating each part."""
    if not isinstance(device_id, str) or device_id.count("=") != 1:
        raise CDIError(
            f"CDI device ID {short(device_id)} is invalid: expected '<vendor>/<class>=<name>', "
            "e.g. 'k8s.compute-domain.nvidia.com/claim=<uid>-channel-0'"
        )
    kind, name = device_id.split("=")
    parse_kind(kind)
    return kind, validate_device_name(name)


# --- strict decoding helpers ------------------------------------------------------------


def _as_object(
    value: object,
    where: str,
    allowed: tuple[str, ...],
    required: tuple[str, ...] = (),
    unsupported: tuple[str, ...] = (),
) -> dict:
    if not isinstance(value, dict):
        raise CDIError(f"{where}: {wrong_type('an object', value)}")
    for key in value:
        if key in unsupported:
            raise CDIError(f"{where}.{key}: valid CDI, but cdriver cannot apply {key}; remove it")
        if key not in allowed:
            raise CDIError(f"{where}: {unknown_field(key, allowed)}")
    for key in required:
        if key not in value:
            raise CDIError(f"{where}: missing required field {key!r}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise CDIError(f"{where}: {wrong_type('a string', value)}")
    if "\x00" in value:
        raise CDIError(f"{where}: NUL character not allowed")
    return value


def _int(value: object, where: str, low: int, high: int) -> int:
    if not is_integer(value):
        raise CDIError(f"{where}: {wrong_type('an integer', value)}")
    if not low <= value <= high:
        raise CDIError(f"{where}: {value} is out of range [{low}, {high}]")
    return value


def _string_list(value: object, where: str) -> list[str]:
    if not isinstance(value, list):
        raise CDIError(f"{where}: {wrong_type('a list of strings', value)}")
    return [_string(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _annotations(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise CDIError(f"{where}: {wrong_type('an object of strings', value)}")
    return {_string(k, f"{where} key"): _string(v, f"{where}[{k!r}]") for k, v in value.items()}


def _abs_path(value: object, where: str, container_side: bool) -> str:
    path = _string(value, where)
    if not path.startswith("/"):
        raise CDIError(f"{where}: {path!r} must be an absolute path")
    if container_side and ".." in path.split("/"):
        raise CDIError(f"{where}: {path!r} must not contain '..' (it would escape the container root)")
    return path


# --- model ------------------------------------------------------------------------------


@dataclass
class DeviceNode:
    """A device node to create in the container (``path``), backed by ``host_path`` if set."""

    path: str
    host_path: str | None = None
    type: str | None = "c"
    major: int | None = None
    minor: int | None = None
    permissions: str | None = None
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None

    def validate(self, where: str = "deviceNode") -> None:
        _abs_path(self.path, f"{where}.path", container_side=True)
        if self.host_path is not None:
            _abs_path(self.host_path, f"{where}.hostPath", container_side=False)
        if self.type is not None and self.type not in DEVICE_NODE_TYPES:
            raise CDIError(f"{where}.type: {self.type!r} is not one of 'b', 'c', 'u', 'p' (or empty)")
        for key, value, high in (
            ("major", self.major, 2**63 - 1),
            ("minor", self.minor, 2**63 - 1),
            ("fileMode", self.file_mode, 0o7777),
            ("uid", self.uid, 2**32 - 1),
            ("gid", self.gid, 2**32 - 1),
        ):
            if value is not None:
                _int(value, f"{where}.{key}", 0, high)
        if self.permissions is not None:
            perms = _string(self.permissions, f"{where}.permissions")
            if not set(perms) <= PERMISSION_LETTERS:
                raise CDIError(f"{where}.permissions: {perms!r} may only use the letters 'r', 'w', 'm'")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        for key, value in (
            ("hostPath", self.host_path),
            ("type", self.type or None),
            ("major", self.major),
            ("minor", self.minor),
            ("fileMode", self.file_mode),
            ("permissions", self.permissions or None),
            ("uid", self.uid),
            ("gid", self.gid),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, obj: object, where: str) -> DeviceNode:
        keys = ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid")
        data = _as_object(obj, where, keys, required=("path",))
        node = cls(
            path=_string(data["path"], f"{where}.path"),
            host_path=data.get("hostPath") or None,
            type=data.get("type"),
            major=data.get("major"),
            minor=data.get("minor"),
            permissions=data.get("permissions"),
            file_mode=data.get("fileMode"),
            uid=data.get("uid"),
            gid=data.get("gid"),
        )
        if node.type is not None:
            _string(node.type, f"{where}.type")
        node.validate(where)
        return node


@dataclass
class Mount:
    """A bind (or typed) mount of ``host_path`` at ``container_path``."""

    host_path: str
    container_path: str
    options: list[str] = field(default_factory=list)
    type: str | None = None

    def validate(self, where: str = "mount") -> None:
        _abs_path(self.host_path, f"{where}.hostPath", container_side=False)
        _abs_path(self.container_path, f"{where}.containerPath", container_side=True)
        _string_list(self.options, f"{where}.options")
        if self.type is not None:
            _string(self.type, f"{where}.type")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out

    @classmethod
    def from_dict(cls, obj: object, where: str) -> Mount:
        data = _as_object(
            obj,
            where,
            ("hostPath", "containerPath", "options", "type"),
            required=("hostPath", "containerPath"),
        )
        mount = cls(
            host_path=_string(data["hostPath"], f"{where}.hostPath"),
            container_path=_string(data["containerPath"], f"{where}.containerPath"),
            options=_string_list(data.get("options", []), f"{where}.options"),
            type=data.get("type") or None,
        )
        mount.validate(where)
        return mount


@dataclass
class Hook:
    """An OCI hook a runtime runs at `hook_name` (the host program `path` with `args`)."""

    hook_name: str
    path: str
    args: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    timeout: int | None = None

    def validate(self, where: str = "hook") -> None:
        if self.hook_name not in HOOK_NAMES:
            raise CDIError(f"{where}.hookName: {self.hook_name!r} is not one of {', '.join(HOOK_NAMES)}")
        _abs_path(self.path, f"{where}.path", container_side=False)
        _string_list(self.args, f"{where}.args")
        _string_list(self.env, f"{where}.env")
        if self.timeout is not None:
            _int(self.timeout, f"{where}.timeout", 1, 2**31 - 1)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    @classmethod
    def from_dict(cls, obj: object, where: str) -> Hook:
        data = _as_object(obj, where, ("hookName", "path", "args", "env", "timeout"), required=("hookName", "path"))
        hook = cls(hook_name=_string(data["hookName"], f"{where}.hookName"),
                   path=_string(data["path"], f"{where}.path"),
                   args=_string_list(data.get("args", []), f"{where}.args"),
                   env=_string_list(data.get("env", []), f"{where}.env"), timeout=data.get("timeout"))
        hook.validate(where)
        return hook


@dataclass
class ContainerEdits:
    """Changes a runtime applies to a container: env entries ``KEY=VALUE``, nodes, mounts, hooks."""

    env: list[str] = field(default_factory=list)
    device_nodes: list[DeviceNode] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks)

    def validate(self, where: str = "containerEdits") -> None:
        for i, entry in enumerate(_string_list(self.env, f"{where}.env")):
            if entry.find("=") <= 0:
                raise CDIError(f"{where}.env[{i}]: {entry!r} must look like KEY=VALUE with a non-empty KEY")
        for i, node in enumerate(self.device_nodes):
            if not isinstance(node, DeviceNode):
                raise CDIError(f"{where}.deviceNodes[{i}]: {wrong_type('a DeviceNode', node)}")
            node.validate(f"{where}.deviceNodes[{i}]")
        for i, mount in enumerate(self.mounts):
            if not isinstance(mount, Mount):
                raise CDIError(f"{where}.mounts[{i}]: {wrong_type('a Mount', mount)}")
            mount.validate(f"{where}.mounts[{i}]")
        for i, hook in enumerate(self.hooks):
            if not isinstance(hook, Hook):
                raise CDIError(f"{where}.hooks[{i}]: {wrong_type('a Hook', hook)}")
            hook.validate(f"{where}.hooks[{i}]")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [node.to_dict() for node in self.device_nodes]
        if self.mounts:
            out["mounts"] = [mount.to_dict() for mount in self.mounts]
        if self.hooks:
            out["hooks"] = [hook.to_dict() for hook in self.hooks]
        return out

    @classmethod
    def from_dict(cls, obj: object, where: str) -> ContainerEdits:
        data = _as_object(obj, where, ("env", "deviceNodes", "mounts", "hooks"), unsupported=_UNSUPPORTED_EDITS)
        nodes, mounts, hooks = data.get("deviceNodes", []), data.get("mounts", []), data.get("hooks", [])
        for key, value in (("deviceNodes", nodes), ("mounts", mounts), ("hooks", hooks)):
            if not isinstance(value, list):
                raise CDIError(f"{where}.{key}: {wrong_type('a list', value)}")
        edits = cls(
            env=_string_list(data.get("env", []), f"{where}.env"),
            device_nodes=[DeviceNode.from_dict(n, f"{where}.deviceNodes[{i}]") for i, n in enumerate(nodes)],
            mounts=[Mount.from_dict(m, f"{where}.mounts[{i}]") for i, m in enumerate(mounts)],
            hooks=[Hook.from_dict(h, f"{where}.hooks[{i}]") for i, h in enumerate(hooks)],
        )
        edits.validate(where)
        return edits


def merge_edits(parts: list[ContainerEdits]) -> ContainerEdits:
    """Combine edits in order as a runtime applies them: a later env entry replaces an earlier
    one with the same key, a later device node one with the same container path, a later mount
    one with the same container path (each keeps the position of its first occurrence); hooks
    are kept in order."""
    env: dict[str, str] = {}
    nodes: dict[str, DeviceNode] = {}
    mounts: dict[str, Mount] = {}
    hooks: list[Hook] = []
    for part in parts:
        hooks.extend(part.hooks)
        for entry in part.env:
            env[entry.split("=", 1)[0]] = entry
        for node in part.device_nodes:
            nodes[node.path] = node
        for mount in part.mounts:
            mounts[mount.container_path] = mount
    return ContainerEdits(env=list(env.values()), device_nodes=list(nodes.values()), mounts=list(mounts.values()),
                          hooks=hooks)


@dataclass
class Device:
    """One named device of a spec and the edits that inject it."""

    name: str
    edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["containerEdits"] = self.edits.to_dict()
        return out

    @classmethod
    def from_dict(cls, obj: object, where: str) -> Device:
        data = _as_object(obj, where, ("name", "annotations", "containerEdits"), required=("name",))
        name = validate_device_name(data["name"])
        where = f"{where}({name})"
        return cls(
            name=name,
            edits=ContainerEdits.from_dict(data.get("containerEdits", {}), f"{where}.containerEdits"),
            annotations=_annotations(data.get("annotations", {}), f"{where}.annotations"),
        )


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclass
class Spec:
    """A CDI spec: a kind (``vendor/class``), its devices and optional spec-level edits."""

    kind: str
    devices: list[Device]
    edits: ContainerEdits | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def vendor(self) -> str:
        return self.kind.split("/", 1)[0]

    @property
    def class_name(self) -> str:
        return self.kind.split("/", 1)[-1]

    def validate(self) -> None:
        parse_kind(self.kind)
        if not isinstance(self.devices, list) or not self.devices:
            raise CDIError(f"CDI spec {self.kind}: needs at least one device")
        seen: set[str] = set()
        for device in self.devices:
            if not isinstance(device, Device):
                raise CDIError(f"CDI spec {self.kind}: devices must be Device objects, got {type_name(device)}")
            validate_device_name(device.name)
            if device.name in seen:
                raise CDIError(f"CDI spec {self.kind}: device name {device.name!r} appears twice; names must be unique")
            seen.add(device.name)
            device.edits.validate(f"devices({device.name}).containerEdits")
            _annotations(device.annotations, f"devices({device.name}).annotations")
        if self.edits is not None:
            self.edits.validate("containerEdits")
        _annotations(self.annotations, "annotations")

    def minimum_version(self) -> str:
        """The lowest ``cdiVersion`` supporting every feature this spec uses."""
        all_edits = [d.edits for d in self.devices] + ([self.edits] if self.edits else [])
        if self.annotations or any(d.annotations for d in self.devices) or "." in self.class_name:
            return "0.6.0"
        if any(d.name[:1].isdigit() for d in self.devices) or any(
            n.host_path for e in all_edits for n in e.device_nodes
        ):
            return "0.5.0"
        if any(m.type for e in all_edits for m in e.mounts):
            return "0.4.0"
        return EARLIEST_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Validated JSON form, with the minimal ``cdiVersion``."""
        self.validate()
        out: dict[str, Any] = {"cdiVersion": self.minimum_version(), "kind": self.kind}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["devices"] = [device.to_dict() for device in self.devices]
        if self.edits is not None and not self.edits.is_empty():
            out["containerEdits"] = self.edits.to_dict()
        return out

    @classmethod
    def from_dict(cls, obj: object, source: str = "spec") -> Spec:
        """Strictly decode a spec document; errors are prefixed with ``source`` (the file)."""
        try:
            data = _as_object(
                obj,
                "spec",
                ("cdiVersion", "kind", "annotations", "devices", "containerEdits"),
                required=("cdiVersion", "kind", "devices"),
            )
            version = data["cdiVersion"]
            if version not in CDI_VERSIONS:
                raise CDIError(f"cdiVersion {version!r} is unknown; known versions: {', '.join(CDI_VERSIONS)}")
            parse_kind(data["kind"])
            devices = data["devices"]
            if not isinstance(devices, list):
                raise CDIError(f"devices: {wrong_type('a list', devices)}")
            edits = data.get("containerEdits")
            spec = cls(
                kind=data["kind"],
                devices=[Device.from_dict(d, f"devices[{i}]") for i, d in enumerate(devices)],
                edits=None if edits is None else ContainerEdits.from_dict(edits, "containerEdits"),
                annotations=_annotations(data.get("annotations", {}), "annotations"),
            )
            spec.validate()
            needed = spec.minimum_version()
            if _version_key(version) < _version_key(needed):
                raise CDIError(f"cdiVersion {version} is too old for the features used; set it to {needed} or later")
        except CDIError as err:
            raise CDIError(f"{source}: {err}") from None
        return spec
