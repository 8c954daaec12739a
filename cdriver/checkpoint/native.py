"""The checkpoint file's content: cdriver's checksummed section beside upstream's parts.

File format (JSON object), readable by the upstream NVIDIA plugin as well::

    {"checksum": N, "v1": {...}, "v2": {...},            # upstream's layout, see upstream
     "cdriver": {"version": 1, "checksum": "<sha256 hex>", "bootID": "<node boot id>",
                 "claims": {"<claim uid>": {"name", "namespace", "state", "devices", "cdiIDs",
                                            "domainID", "kind", "updated"}}}}

The ``cdriver`` section is the complete record; its ``checksum`` is the SHA-256 of the
canonical JSON (sorted keys, no whitespace) of its other fields. The upstream parts carry the
same claims in upstream's form, so either driver can take over the node: upstream ignores the
``cdriver`` key (and drops it when it rewrites the file); a file without it (written by
upstream, in its current or older layout) is converted on load. A file that holds only the
``cdriver`` fields at top level (older cdriver releases) is read too.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from cdriver.checkpoint.model import (
    Checkpoint,
    CheckpointError,
    ClaimRecord,
    InvalidContent,
    as_object,
    check_keys,
    check_string,
    type_name,
)
from cdriver.checkpoint.upstream import UPSTREAM_KEYS, UpstreamLayoutError, from_upstream, to_upstream
from cdriver.decoding import DecodeError, strict_json_loads

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
#: Key of cdriver's own section in the shared file.
SECTION = "cdriver"


def payload(checkpoint: Checkpoint) -> dict[str, Any]:
    """The checksummed content of cdriver's section (everything but the checksum)."""
    out: dict[str, Any] = {"version": CHECKPOINT_VERSION}
    if checkpoint.boot_id:
        out["bootID"] = checkpoint.boot_id
    claims = {}
    for uid, record in checkpoint.claims.items():
        if record.uid != uid:
            raise CheckpointError(f"claims[{uid!r}] holds the record of claim {record.uid!r}; key it by its UID")
        claims[uid] = record.to_dict()
    out["claims"] = claims
    return out


def _canonical(content: dict[str, Any]) -> bytes:
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def checksum(content: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``content``."""
    return hashlib.sha256(_canonical(content)).hexdigest()


def encode(checkpoint: Checkpoint) -> bytes:
    """File content for ``checkpoint``; it is decoded back first, so nothing unreadable is written."""
    content = payload(checkpoint)
    try:
        document = {**to_upstream(checkpoint), SECTION: {"checksum": checksum(content), **content}}
        data = json.dumps(document, indent=1, allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"checkpoint content is not plain JSON data ({err}); nothing was written") from None
    try:
        decode(data)
    except InvalidContent as err:
        raise CheckpointError(f"refusing to write an invalid checkpoint ({err}); nothing was written") from None
    return data


def decode(data: bytes) -> Checkpoint:
    """Parse and verify file content; raises `InvalidContent` with the reason."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise InvalidContent(f"{len(data)} bytes, more than the {MAX_CHECKPOINT_BYTES}-byte limit")
    try:
        document = strict_json_loads(data.decode("utf-8"))
    except DecodeError as err:  # a duplicate key, NaN or Infinity
        raise InvalidContent(err.problem) from None
    except UnicodeDecodeError as err:
        raise InvalidContent(f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise InvalidContent(f"truncated or invalid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise InvalidContent("JSON nested too deeply") from None
    document = as_object(document, "checkpoint")
    if SECTION in document:
        return _decode_native(as_object(document[SECTION], SECTION))
    if "version" not in document and any(key in document for key in UPSTREAM_KEYS):
        unknown = sorted(str(key)[:60] for key in document if key not in UPSTREAM_KEYS)
        if unknown:  # e.g. a damaged "cdriver" key: reading only upstream's part would lose claims
            raise InvalidContent(
                f"unknown top-level key {unknown[0]!r} (known: {SECTION}, {', '.join(UPSTREAM_KEYS)}): "
                "the file was modified or damaged, or written by a newer driver"
            )
        return _decode_upstream(document)
    return _decode_native(document)


def _decode_upstream(document: dict) -> Checkpoint:
    try:
        checkpoint, layout = from_upstream(document)
    except UpstreamLayoutError as err:
        raise InvalidContent(f"upstream checkpoint layout: {err}") from None
    log.info("read the upstream driver's checkpoint (layout %s, %d claims); converted", layout, len(checkpoint.claims))
    return checkpoint


def _decode_native(document: dict) -> Checkpoint:
    version = document.get("version")
    if type(version) is not int or version != CHECKPOINT_VERSION:
        if version is None:
            raise InvalidContent("no 'version' field: neither a cdriver nor an upstream driver checkpoint")
        raise InvalidContent(
            f"version {repr(version)[:40]} is not supported (this cdriver reads version {CHECKPOINT_VERSION})"
        )
    check_keys(document, ("version", "checksum", "bootID", "claims"), ("version", "checksum", "claims"), "checkpoint")
    stored = document.pop("checksum")
    if not isinstance(stored, str):
        raise InvalidContent(f"checksum: expected a string, got {type_name(stored)}")
    try:
        actual = checksum(document)
    except ValueError as err:
        raise InvalidContent(f"content is not plain JSON data ({err})") from None
    if stored != actual:
        raise InvalidContent(
            f"checksum mismatch (stored {stored[:64]!r}, content hashes to {actual!r}): "
            "the file was modified or damaged"
        )
    boot_id = document.get("bootID", "")
    check_string(boot_id, "bootID")
    claims = as_object(document["claims"], "claims")
    return Checkpoint(
        boot_id=boot_id,
        claims={uid: ClaimRecord.from_dict(uid, rec, f"claims[{uid[:60]!r}]") for uid, rec in claims.items()},
    )
