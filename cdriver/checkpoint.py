"""The kubelet plugin's record of prepared claims: versioned, checksummed, locked, atomic.

File format (JSON object), readable by the upstream NVIDIA plugin as well::

    {"checksum": N, "v1": {...}, "v2": {...},            # upstream's layout, see checkpoint_upstream
     "cdriver": {"version": 1, "checksum": "<sha256 hex>", "bootID": "<node boot id>",
                 "claims": {"<claim uid>": {"name", "namespace", "state", "devices", "cdiIDs",
                                            "domainID", "kind", "updated"}}}}

The ``cdriver`` section is the complete record; its ``checksum`` is the SHA-256 of the
canonical JSON (sorted keys, no whitespace) of its other fields. The upstream parts carry the
same claims in upstream's form, so either driver can take over the node: upstream ignores the
``cdriver`` key (and drops it when it rewrites the file); a file without it (written by
upstream, in its current or older layout) is converted on load. A file that holds only the
``cdriver`` fields at top level (older cdriver releases) is read too.

A file that cannot be read, fails a checksum, or has an unknown version is never discarded or
rewritten: loading raises :class:`CheckpointError` naming the file and the recovery step.
Writers serialise on ``pu.lock`` next to the file (a real ``flock``, the lock file upstream's
plugin takes around Prepare/Unprepare), so two plugins never interleave read-modify-write
cycles.

A node reboot voids every prepared claim (device nodes and transient CDI specs do not survive
it); claims recorded under another boot id are dropped when the checkpoint is loaded.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from cdriver.atomic import atomic_write, remove_stale_temp_files
from cdriver.checkpoint_upstream import UPSTREAM_KEYS, UpstreamLayoutError, from_upstream, to_upstream
from cdriver.errors import CdriverError

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"  # changes on every boot

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
MAX_FIELD_LENGTH = 253  # uid, name, namespace, domainID, kind
FILE_MODE = 0o600
#: The lock file both plugins take (upstream holds it around each Prepare/Unprepare).
LOCK_FILE_NAME = "pu.lock"
#: Key of cdriver's own section in the shared file.
SECTION = "cdriver"
#: An unusable file is kept as ``<name>.corrupt-<UTC time>``.
ASIDE_SUFFIX = ".corrupt-"


class CheckpointError(CdriverError):
    """The checkpoint cannot be read, written or locked; the message says what to do."""


class CorruptCheckpoint(CheckpointError):
    """The file was read but its content is unusable (``reason`` says why)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ClaimState(enum.StrEnum):
    """Where a claim is in Prepare. Intent is recorded (STARTED) before any side effect."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    #: Unprepared while Prepare had not finished; kept a while (``updated`` = when) so a
    #: late Prepare retry of the same claim cannot bring its devices back.
    PREPARE_ABORTED = "PrepareAborted"


@dataclass
class ClaimRecord:
    """One claim the plugin has started or finished preparing."""

    uid: str
    name: str = ""
    namespace: str = ""
    state: ClaimState = ClaimState.PREPARE_STARTED
    devices: list[dict[str, Any]] = field(default_factory=list)
    cdi_ids: list[str] = field(default_factory=list)
    domain_id: str = ""
    kind: str = ""
    updated: float = field(default_factory=time.time)
    #: The ResourceClaim status the upstream plugin recorded (claims taken over from it), kept
    #: so that a switch back hands it the same entry; empty for claims cdriver prepared.
    status: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "state": str(self.state),
            "devices": copy.deepcopy(self.devices),
            "cdiIDs": list(self.cdi_ids),
            "domainID": self.domain_id,
            "kind": self.kind,
            "updated": self.updated,
            **({"status": copy.deepcopy(self.status)} if self.status else {}),
        }

    @classmethod
    def from_dict(cls, uid: str, obj: object, where: str) -> ClaimRecord:
        _check_string(uid, f"{where} key", nonempty=True)
        data = _as_object(obj, where)
        fields = ("name", "namespace", "state", "devices", "cdiIDs", "domainID", "kind", "updated")
        _check_keys(data, (*fields, "status"), fields, where)
        state = data["state"]
        if state not in tuple(ClaimState):
            raise _Invalid(f"{where}.state: {state!r} is not one of {', '.join(ClaimState)}")
        devices = data["devices"]
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            raise _Invalid(f"{where}.devices: expected a list of objects")
        cdi_ids = data["cdiIDs"]
        if not isinstance(cdi_ids, list):
            raise _Invalid(f"{where}.cdiIDs: expected a list of strings, got {_type_name(cdi_ids)}")
        for i, cdi_id in enumerate(cdi_ids):
            _check_string(cdi_id, f"{where}.cdiIDs[{i}]", limit=2 * MAX_FIELD_LENGTH + 1)
        updated = data["updated"]
        if isinstance(updated, bool) or not isinstance(updated, int | float) or not math.isfinite(updated):
            raise _Invalid(f"{where}.updated: expected a number of seconds, got {_type_name(updated)}")
        for key in ("name", "namespace", "domainID", "kind"):
            _check_string(data[key], f"{where}.{key}")
        return cls(
            uid=uid,
            name=data["name"],
            namespace=data["namespace"],
            state=ClaimState(state),
            devices=devices,
            cdi_ids=cdi_ids,
            domain_id=data["domainID"],
            kind=data["kind"],
            updated=float(updated),
            status=_as_object(data.get("status", {}), f"{where}.status"),
        )


@dataclass
class Checkpoint:
    """Everything the plugin remembers: the boot it belongs to and the claims by UID."""

    boot_id: str = ""
    claims: dict[str, ClaimRecord] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """The checksummed content (everything but the checksum)."""
        out: dict[str, Any] = {"version": CHECKPOINT_VERSION}
        if self.boot_id:
            out["bootID"] = self.boot_id
        claims = {}
        for uid, record in self.claims.items():
            if record.uid != uid:
                raise CheckpointError(f"claims[{uid!r}] holds the record of claim {record.uid!r}; key it by its UID")
            claims[uid] = record.to_dict()
        out["claims"] = claims
        return out


# --- encoding ---------------------------------------------------------------------------


class _Invalid(Exception):
    """Decoding failure; turned into a CheckpointError that names the file."""


def _type_name(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _as_object(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise _Invalid(f"{where}: expected an object, got {_type_name(value)}")
    return value


def _check_keys(data: dict, allowed: tuple[str, ...], required: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise _Invalid(f"{where}: unknown field {str(key)[:60]!r}")
    for key in required:
        if key not in data:
            raise _Invalid(f"{where}: missing field {key!r}")


def _check_string(value: object, where: str, nonempty: bool = False, limit: int = MAX_FIELD_LENGTH) -> None:
    if not isinstance(value, str):
        raise _Invalid(f"{where}: expected a string, got {_type_name(value)}")
    if nonempty and not value:
        raise _Invalid(f"{where}: must not be empty")
    if len(value) > limit:
        raise _Invalid(f"{where}: {len(value)} characters, more than the limit of {limit}")


def _canonical(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def checksum(payload: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``payload``."""
    return hashlib.sha256(_canonical(payload)).hexdigest()


def encode(checkpoint: Checkpoint) -> bytes:
    """File content for ``checkpoint``; it is decoded back first, so nothing unreadable is written."""
    payload = checkpoint.payload()
    try:
        document = {**to_upstream(checkpoint), SECTION: {"checksum": checksum(payload), **payload}}
        data = json.dumps(document, indent=1, allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"checkpoint content is not plain JSON data ({err}); nothing was written") from None
    try:
        decode(data)
    except _Invalid as err:
        raise CheckpointError(f"refusing to write an invalid checkpoint ({err}); nothing was written") from None
    return data


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Invalid(f"key {key[:60]!r} appears twice in one object")
        out[key] = value
    return out


def _reject_constant(name: str) -> None:
    raise _Invalid(f"{name} is not a valid JSON number")


def decode(data: bytes) -> Checkpoint:
    """Parse and verify file content; raises ``_Invalid`` with the reason."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise _Invalid(f"{len(data)} bytes, more than the {MAX_CHECKPOINT_BYTES}-byte limit")
    try:
        document = json.loads(
            data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant
        )
    except UnicodeDecodeError as err:
        raise _Invalid(f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise _Invalid(f"truncated or invalid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise _Invalid("JSON nested too deeply") from None
    document = _as_object(document, "checkpoint")
    if SECTION in document:
        return _decode_native(_as_object(document[SECTION], SECTION))
    if "version" not in document and any(key in document for key in UPSTREAM_KEYS):
        unknown = sorted(str(key)[:60] for key in document if key not in UPSTREAM_KEYS)
        if unknown:  # e.g. a damaged "cdriver" key: reading only upstream's part would lose claims
            raise _Invalid(f"unknown top-level key {unknown[0]!r} (known: {SECTION}, {', '.join(UPSTREAM_KEYS)}): "
                           "the file was modified or damaged, or written by a newer driver")
        return _decode_upstream(document)
    return _decode_native(document)


def _decode_upstream(document: dict) -> Checkpoint:
    def make_record(uid: str, **fields: Any) -> ClaimRecord:
        _check_string(uid, "preparedClaims key", nonempty=True)
        return ClaimRecord(uid=uid, **{**fields, "state": ClaimState(fields["state"])})

    try:
        boot_id, claims, layout = from_upstream(document, make_record)
    except UpstreamLayoutError as err:
        raise _Invalid(f"upstream checkpoint layout: {err}") from None
    log.info("read the upstream driver's checkpoint (layout %s, %d claims); converted", layout, len(claims))
    return Checkpoint(boot_id=boot_id, claims=claims)


def _decode_native(document: dict) -> Checkpoint:
    version = document.get("version")
    if type(version) is not int or version != CHECKPOINT_VERSION:
        if version is None:
            raise _Invalid("no 'version' field: neither a cdriver nor an upstream driver checkpoint")
        raise _Invalid(
            f"version {repr(version)[:40]} is not supported (this cdriver reads version {CHECKPOINT_VERSION})"
        )
    _check_keys(document, ("version", "checksum", "bootID", "claims"), ("version", "checksum", "claims"), "checkpoint")
    stored = document.pop("checksum")
    if not isinstance(stored, str):
        raise _Invalid(f"checksum: expected a string, got {_type_name(stored)}")
    try:
        actual = checksum(document)
    except ValueError as err:
        raise _Invalid(f"content is not plain JSON data ({err})") from None
    if stored != actual:
        raise _Invalid(
            f"checksum mismatch (stored {stored[:64]!r}, content hashes to {actual!r}): "
            "the file was modified or damaged"
        )
    boot_id = document.get("bootID", "")
    _check_string(boot_id, "bootID")
    claims = _as_object(document["claims"], "claims")
    return Checkpoint(
        boot_id=boot_id,
        claims={uid: ClaimRecord.from_dict(uid, rec, f"claims[{uid[:60]!r}]") for uid, rec in claims.items()},
    )


# --- boot id ----------------------------------------------------------------------------


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id (changes on every reboot); "" (reboot detection off) if unreadable."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError as err:
        log.warning("cannot read boot id from %s (%s); reboots will not reset the checkpoint", path, err)
        return ""


def apply_boot_id(checkpoint: Checkpoint, boot_id: str) -> list[str]:
    """Bind ``checkpoint`` to ``boot_id``. Claims from another boot are dropped (their device
    nodes and CDI specs are gone); returns their UIDs. A checkpoint without a boot id (or an
    unknown current one) keeps its claims."""
    if not boot_id or checkpoint.boot_id == boot_id:
        return []
    dropped = []
    if checkpoint.boot_id:
        dropped = sorted(checkpoint.claims)
        for uid in dropped:
            del checkpoint.claims[uid]
    checkpoint.boot_id = boot_id
    return dropped


# --- lock holders (for the timeout message) ---------------------------------------------


def lock_holders(lock_path: str | os.PathLike[str]) -> list[int]:
    """PIDs holding a POSIX/flock lock on ``lock_path`` according to /proc/locks."""
    try:
        st = os.stat(lock_path)
        with open("/proc/locks") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":  # "->" marks a waiter, not a holder
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == (
                os.major(st.st_dev),
                os.minor(st.st_dev),
                st.st_ino,
            ):
                pids.append(int(fields[4]))
        except ValueError:
            continue
    return sorted(set(pids))


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmdline = ""
    return f"pid {pid} ({cmdline[:120]})" if cmdline else f"pid {pid}"


# --- store ------------------------------------------------------------------------------


class CheckpointStore:
    """The checkpoint file at ``path``; writers serialise on ``<path>.lock``."""

    def __init__(self, path: str | os.PathLike[str], boot_id: str | None = None, lock_timeout: float = 10):
        self.path = Path(path)
        self.lock_path = self.path.with_name(LOCK_FILE_NAME)
        self.lock_timeout = lock_timeout
        self._boot_id = boot_id
        self._lock = filelock.FileLock(self.lock_path, timeout=lock_timeout)
        self._holding = threading.local()

    @property
    def boot_id(self) -> str:
        if self._boot_id is None:
            self._boot_id = read_boot_id()
        return self._boot_id

    def _error(self, reason: str) -> CorruptCheckpoint:
        return CorruptCheckpoint(
            f"checkpoint {self.path} is unusable: {reason}. The file was left untouched. To recover, restart "
            f"the kubelet plugin: it moves the file aside (to {self.path.name}{ASIDE_SUFFIX}<time>, kept for "
            "inspection) and rebuilds the record of prepared claims from the API server and the CDI specs on "
            "this node, deleting none of them.",
            reason,
        )

    def keep_aside(self, now: float | None = None) -> Path:
        """Rename the (unusable) file to ``<name>.corrupt-<UTC time>`` next to it, never over an
        existing file; returns the new path. Nothing is written in its place."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        with self._lock_held():
            for attempt in range(1000):
                extra = f".{attempt}" if attempt else ""
                target = self.path.with_name(f"{self.path.name}{ASIDE_SUFFIX}{stamp}{extra}")
                try:
                    os.link(self.path, target)
                except FileExistsError:
                    continue
                except OSError as err:
                    raise CheckpointError(
                        f"cannot keep checkpoint {self.path} aside as {target}: {err.strerror or err}"
                    ) from None
                os.unlink(self.path)
                return target
        raise CheckpointError(f"cannot keep checkpoint {self.path} aside: 1000 kept copies exist; remove old ones")

    @contextlib.contextmanager
    def _lock_held(self) -> Iterator[None]:
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise CheckpointError(f"timed out waiting for the checkpoint lock {self.lock_path}") from None
        try:
            yield
        finally:
            self._lock.release()

    def _load(self) -> tuple[Checkpoint, bytes | None]:
        """The stored checkpoint (empty if there is no file) and the raw bytes read."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read(MAX_CHECKPOINT_BYTES + 1)
        except FileNotFoundError:
            return Checkpoint(boot_id=self.boot_id), None
        except OSError as err:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {err.strerror or err}") from None
        try:
            return decode(data), data
        except _Invalid as err:
            raise self._error(str(err)) from None

    def read(self) -> Checkpoint:
        """A snapshot, without locking; claims from before a reboot are already dropped."""
        checkpoint, _ = self._load()
        dropped = apply_boot_id(checkpoint, self.boot_id)
        if dropped:
            log.debug("checkpoint %s is from an earlier boot; %d claims void", self.path, len(dropped))
        return checkpoint

    @contextlib.contextmanager
    def locked(self) -> Iterator[Checkpoint]:
        """Hold the lock, yield the checkpoint for changes, save it atomically on a clean exit
        (only if something changed). An exception in the block saves nothing."""
        if getattr(self._holding, "active", False):
            raise RuntimeError("CheckpointStore.locked() is not reentrant; use the checkpoint already yielded")
        try:
            self.path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            self._lock.acquire()
        except filelock.Timeout:
            holders = ", ".join(_describe(pid) for pid in lock_holders(self.lock_path)) or "another process"
            raise CheckpointError(
                f"timed out after {self.lock_timeout:g}s waiting for the checkpoint lock {self.lock_path}, "
                f"held by {holders}. Check that only one cdriver kubelet-plugin runs on this node and "
                "that it is not stuck; the lock is released when the holder exits."
            ) from None
        except OSError as err:
            raise CheckpointError(f"cannot lock checkpoint {self.lock_path}: {err.strerror or err}") from None
        self._holding.active = True
        try:
            remove_stale_temp_files(self.path)  # safe: every writer holds the lock
            checkpoint, raw = self._load()
            before = None if raw is None else checkpoint.payload()
            dropped = apply_boot_id(checkpoint, self.boot_id)
            if dropped:
                log.warning(
                    "node rebooted since checkpoint %s was written: dropping %d prepared claims (%s); their "
                    "device nodes and CDI specs did not survive the reboot",
                    self.path,
                    len(dropped),
                    ", ".join(dropped),
                )
            yield checkpoint
            if checkpoint.payload() != before:
                self._write(checkpoint)
        finally:
            self._holding.active = False
            self._lock.release()

    def _write(self, checkpoint: Checkpoint) -> None:
        data = encode(checkpoint)
        try:
            atomic_write(self.path, data, mode=FILE_MODE)
        except OSError as err:
            raise CheckpointError(
                f"cannot write checkpoint {self.path}: {err.strerror or err}; the previous content is intact"
            ) from None
