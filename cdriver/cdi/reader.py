"""Resolve qualified CDI device IDs to container edits, as a container runtime does.

Spec files (``*.json``, ``*.yaml`` directly in each dir; hidden files skipped) are re-scanned on
every :meth:`CDIRegistry.resolve`, re-parsing only files that changed. Dirs are in priority
order: a device defined in a later dir overrides the same device in an earlier one; the same
device defined twice in one dir is ambiguous. A malformed file is reported (``errors``, a log
line, and in the message for any ID it might have defined) without hiding other specs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from cdriver.cdi.model import CDIError, ContainerEdits, Device, Spec, merge_edits, parse_qualified_name
from cdriver.cdi.writer import SPEC_EXTENSIONS
from cdriver.decoding import DecodeError, TooLarge, read_bounded, strict_json_loads

log = logging.getLogger(__name__)

MAX_SPEC_FILE_BYTES = 16 * 1024 * 1024


def load_spec_file(path: str | os.PathLike[str]) -> Spec:
    """Read and strictly decode one spec file; every error names the file."""
    path = Path(path)
    try:
        data = read_bounded(path, MAX_SPEC_FILE_BYTES)
    except OSError as err:
        raise CDIError(f"{path}: cannot read: {err.strerror or err}") from None
    except TooLarge:
        raise CDIError(f"{path}: larger than the {MAX_SPEC_FILE_BYTES}-byte limit for a CDI spec; not loaded") from None
    try:
        text = data.decode("utf-8")
        if path.suffix == ".json":
            obj = strict_json_loads(text)
        else:
            obj = yaml.safe_load(text)
    except UnicodeDecodeError as err:
        raise CDIError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise CDIError(f"{path}: invalid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise CDIError(f"{path}: invalid YAML ({getattr(err, 'problem', None) or err}{where})") from None
    except RecursionError:
        raise CDIError(f"{path}: nested too deeply to be a CDI spec") from None
    except DecodeError as err:
        raise CDIError(f"{path}: invalid JSON ({err})") from None
    if obj is None:
        raise CDIError(f"{path}: empty file; a CDI spec needs cdiVersion, kind and devices")
    return Spec.from_dict(obj, source=str(path))


@dataclass(frozen=True)
class _Entry:
    priority: int
    path: Path
    spec: Spec
    device: Device


class CDIRegistry:
    """The CDI devices defined by the spec files in ``dirs`` (lowest priority first)."""

    def __init__(self, dirs: Sequence[str | os.PathLike[str]]):
        self.dirs = [Path(d) for d in dirs]
        self._files: dict[Path, tuple[tuple[int, int, int], Spec | CDIError]] = {}
        self._devices: dict[str, list[_Entry]] = {}
        self.errors: dict[Path, str] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-scan the dirs; re-parse new or changed files only."""
        files: dict[Path, tuple[tuple[int, int, int], Spec | CDIError]] = {}
        devices: dict[str, list[_Entry]] = {}
        for priority, directory in enumerate(self.dirs):
            for path in self._spec_files(directory):
                try:
                    st = path.stat()
                except FileNotFoundError:  # removed while scanning
                    continue
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                cached = self._files.get(path)
                if cached is None or cached[0] != key:
                    cached = (key, self._load(path))
                files[path] = cached
                loaded = cached[1]
                if isinstance(loaded, Spec):
                    for device in loaded.devices:
                        device_id = f"{loaded.kind}={device.name}"
                        devices.setdefault(device_id, []).append(_Entry(priority, path, loaded, device))
        self._files = files
        self._devices = devices
        self.errors = {path: str(v[1]) for path, v in files.items() if isinstance(v[1], CDIError)}

    @staticmethod
    def _spec_files(directory: Path) -> list[Path]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            Path(entry.path)
            for entry in entries
            if entry.name.endswith(SPEC_EXTENSIONS) and not entry.name.startswith(".") and entry.is_file()
        ]

    @staticmethod
    def _load(path: Path) -> Spec | CDIError:
        try:
            return load_spec_file(path)
        except CDIError as err:
            log.warning("skipping CDI spec file: %s", err)
            return err

    def device_ids(self) -> list[str]:
        """Every qualified device ID currently defined (including ambiguous ones)."""
        return sorted(self._devices)

    def _lookup(self, device_id: str) -> _Entry:
        parse_qualified_name(device_id)
        entries = self._devices.get(device_id)
        if not entries:
            hint = ""
            if self.errors:
                messages = list(self.errors.values())
                broken = "; ".join(messages[:3])
                if len(messages) > 3:
                    broken += f"; and {len(messages) - 3} more"
                hint = f"; spec files that failed to load (one may define it): {broken}"
            dirs = ", ".join(str(d) for d in self.dirs)
            raise CDIError(f"CDI device {device_id!r} is not defined in any spec file in {dirs}{hint}")
        top = max(entry.priority for entry in entries)
        winners = [entry for entry in entries if entry.priority == top]
        if len(winners) > 1:
            files = ", ".join(str(entry.path) for entry in winners)
            raise CDIError(f"CDI device {device_id!r} is ambiguous: defined in {files}; remove the stale spec file")
        return winners[0]

    def resolve(self, ids: Iterable[str]) -> ContainerEdits:
        """Merged edits for ``ids``: each spec's own edits once, then each device's edits."""
        self.refresh()
        parts: list[ContainerEdits] = []
        seen_specs: set[int] = set()
        seen_ids: set[str] = set()
        for device_id in ids:
            if device_id in seen_ids:
                continue
            seen_ids.add(device_id)
            entry = self._lookup(device_id)
            if id(entry.spec) not in seen_specs:
                seen_specs.add(id(entry.spec))
                if entry.spec.edits is not None:
                    parts.append(entry.spec.edits)
            parts.append(entry.device.edits)
        return merge_edits(parts)
