"""Atomic file replacement: a reader sees the old content or the new, never a part of either.

A write goes to a hidden temp file in the target's directory (``.<name>.<random>.tmp``), is
fsynced, renamed over the target, and the directory is fsynced so the rename survives a crash.
`atomic_write` writes given bytes or text; `atomic_path` hands out the temp path for content
another writer produces (a copy, a compiler's output) and replaces the target when it is done.
A writer killed before the rename leaves the target untouched; its temp file is hidden (dot
prefix, ``.tmp`` suffix) so directory scanners that pick ``*.json`` / ``*.yaml`` ignore it, and
:func:`remove_stale_temp_files` clears such leftovers when the caller knows no writer is active.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def atomic_write(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``data`` atomically and durably; returns the path.

    Raises ``OSError`` (directory missing, not writable, disk full); the target is then
    unchanged and no temp file remains.
    """
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=_temp_prefix(target), suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)
    return target


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[Path]:
    """Yield a temp path next to ``path``; when the block ends without error, give it ``mode``,
    fsync it and rename it over ``path`` (then fsync the directory).

    The block may replace the temp file (``cp``, a linker's ``-o``). On any error the temp
    file is removed and the target stays unchanged.
    """
    target = Path(path)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=_temp_prefix(target), suffix=TEMP_SUFFIX)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def remove_file(path: str | os.PathLike[str]) -> bool:
    """Delete ``path`` durably; a missing file is fine. Returns whether a file was removed."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(target.parent)
    return True


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (renames, unlinks) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stale_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """Temp files left next to ``path`` by interrupted :func:`atomic_write` calls."""
    target = Path(path)
    prefix = _temp_prefix(target)
    try:
        names = os.listdir(target.parent)
    except FileNotFoundError:
        return []
    return sorted(target.parent / name for name in names if name.startswith(prefix) and name.endswith(TEMP_SUFFIX))


def remove_stale_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """Delete leftovers of interrupted writes to ``path``; call only while no writer is active
    (e.g. under the lock that serialises writers). Returns the removed paths."""
    removed = []
    for leftover in stale_temp_files(path):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
            removed.append(leftover)
    return removed
