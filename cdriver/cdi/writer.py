"""Transient CDI spec files: written atomically into a CDI dir, listed, removed.

A transient spec lives as long as an outside object (here: a prepared claim) and is named
``<vendor>-<class>_<id>``; the file is ``<spec name>.yaml`` holding JSON (a YAML subset), the
name the CDI library gives a spec written under that name: so the upstream driver, on a node
switched between the two drivers, replaces and removes the very files cdriver wrote (a second
file defining the same devices would make every runtime refuse them as conflicting). Runtimes
watch the CDI dir, so a file is always replaced whole (see :mod:`cdriver.atomic`), never edited
in place.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cdriver.api.constants import CDI_CLASS_CLAIM, CDI_VENDOR
from cdriver.atomic import atomic_write, remove_file
from cdriver.cdi.model import CDIError, Spec, validate_class, validate_vendor

SPEC_EXTENSIONS = (".json", ".yaml")
#: what the CDI library appends to a spec name without an extension (upstream's files)
SPEC_EXTENSION = ".yaml"
SPEC_FILE_MODE = 0o644
MAX_SPEC_NAME_LENGTH = 250  # leaves room for the extension within the 255-byte file name limit

_SPEC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TRANSIENT_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")


def validate_spec_name(spec_name: object) -> str:
    """A spec name must be a plain file name stem: no '/', no leading '.', bounded length."""
    if not isinstance(spec_name, str) or not _SPEC_NAME.fullmatch(spec_name) or len(spec_name) > MAX_SPEC_NAME_LENGTH:
        raise CDIError(
            f"CDI spec name {str(spec_name)[:80]!r} is invalid: use 1-{MAX_SPEC_NAME_LENGTH} letters, "
            "digits, '_', '-', '.', starting with a letter or digit (it becomes a file name in the CDI dir)"
        )
    return spec_name


def transient_spec_name(vendor: str, class_name: str, transient_id: str) -> str:
    """``<vendor>-<class>_<id>``: the name of a spec tied to one outside object."""
    validate_vendor(vendor)
    validate_class(class_name)
    if not isinstance(transient_id, str) or not _TRANSIENT_ID.fullmatch(transient_id):
        raise CDIError(
            f"transient CDI spec id {str(transient_id)[:80]!r} is invalid: use letters, digits, "
            "'_', '-', '.', starting and ending with a letter or digit"
        )
    return validate_spec_name(f"{vendor}-{class_name}_{transient_id}")


def claim_spec_name(claim_uid: str) -> str:
    """Spec name for a prepared claim: ``k8s.compute-domain.nvidia.com-claim_<uid>``."""
    return transient_spec_name(CDI_VENDOR, CDI_CLASS_CLAIM, claim_uid)


def spec_path(cdi_dir: str | os.PathLike[str], spec_name: str) -> Path:
    """Where :func:`write_spec` puts ``spec_name``."""
    return Path(cdi_dir) / f"{validate_spec_name(spec_name)}{SPEC_EXTENSION}"


def existing_spec_path(cdi_dir: str | os.PathLike[str], spec_name: str) -> Path:
    """The file holding ``spec_name`` (either extension: cdriver's, upstream's, earlier versions');
    :func:`spec_path` when there is none."""
    written = spec_path(cdi_dir, spec_name)
    for ext in SPEC_EXTENSIONS:
        path = written.with_suffix(ext)
        if path.is_file():
            return path
    return written


def write_spec(cdi_dir: str | os.PathLike[str], spec_name: str, spec: Spec) -> Path:
    """Validate ``spec`` and write it atomically as ``<cdi_dir>/<spec_name>.yaml`` (JSON text).

    The directory is created if missing. A same-named ``.json`` file (as earlier cdriver
    versions wrote) is removed afterwards so the runtime never sees the devices twice.
    """
    path = spec_path(cdi_dir, spec_name)
    text = json.dumps(spec.to_dict(), indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text, mode=SPEC_FILE_MODE)
        remove_file(path.with_suffix(".json"))
    except OSError as err:
        raise CDIError(
            f"cannot write CDI spec {path}: {err.strerror or err}; check that {path.parent} is a writable "
            "directory (the --cdi-root setting)"
        ) from None
    return path


def remove_spec(cdi_dir: str | os.PathLike[str], spec_name: str) -> bool:
    """Remove the spec's file(s); missing files are fine. Returns whether anything was removed."""
    base = Path(cdi_dir) / validate_spec_name(spec_name)
    removed = False
    for ext in SPEC_EXTENSIONS:
        path = base.with_name(base.name + ext)
        try:
            removed = remove_file(path) or removed
        except OSError as err:
            raise CDIError(f"cannot remove CDI spec {path}: {err.strerror or err}") from None
    return removed


def list_specs(cdi_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the spec files in ``cdi_dir`` (sorted, extension dropped, hidden files skipped)."""
    try:
        entries = list(os.scandir(cdi_dir))
    except FileNotFoundError:
        return []
    names = {
        entry.name[: -len(ext)]
        for entry in entries
        for ext in SPEC_EXTENSIONS
        if entry.name.endswith(ext) and not entry.name.startswith(".") and entry.is_file()
    }
    return sorted(names)
