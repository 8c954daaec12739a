"""The builder's cache: content keys, and builds that appear whole or not at all.

Everything lives in ``${XDG_CACHE_HOME:-~/.cache}/cdriver``. A build is keyed by a hash of its
inputs; builders of one key serialise on ``<dir>.lock``, build into ``<dir>.tmp.<pid>``, mark it
``.complete`` and rename it into place, so a reader never sees half of one. Old builds of the
same name that have not been used for a day are pruned after a new one is made.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock, Timeout

from cdriver.sim.images.refs import ImageBuildError

LOCK_TIMEOUT_S = 3600
#: a cached build of an older input that has not been used for this long is removed after a
#: new one of the same name is built (each source change adds a driver archive)
PRUNE_AFTER_S = 24 * 3600


def cache_root() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/cdriver`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cdriver"


# --------------------------------------------------------------------------------------
# Cache keys
# --------------------------------------------------------------------------------------

def builder_files() -> list[Path]:
    """The builder's own modules (part of every image's key)."""
    here = Path(__file__).resolve().parent
    return sorted(here.glob("*.py"))


def files_under(root: Path, paths: Iterable[str]) -> list[Path]:
    """Every file below `paths` of `root`, sorted, without Python byte code."""
    found: list[Path] = []
    for rel in paths:
        p = root / rel
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                      and f.suffix not in (".pyc", ".pyo")]
    return sorted(set(found))


def input_hash(parts: Iterable[str], files: Iterable[Path], root: Path | None = None) -> str:
    """Hash of some strings and the names and contents of some files (16 hex digits)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(b"s\0" + part.encode() + b"\0")
    for f in files:
        name = f.relative_to(root).as_posix() if root is not None else f.name
        h.update(b"f\0" + name.encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------
# The cache: lock, build into a temporary directory, mark complete, rename
# --------------------------------------------------------------------------------------

def cached(out: Path, build: Callable[[Path], None], log: Callable[[str], None]) -> Path:
    """`out` once it holds a finished build; `build(tmp_dir)` makes one if none exists yet."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out) + ".lock")
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT_S):
            if (out / ".complete").is_file():
                os.utime(out / ".complete")  # marks it used (see prune_stale)
                return out
            for stale in out.parent.glob(f"{out.name}.tmp.*"):  # left by a build that was killed
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(f"{out}.tmp.{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            start = time.monotonic()
            try:
                build(tmp)
                (tmp / ".complete").touch()
                shutil.rmtree(out, ignore_errors=True)
                tmp.rename(out)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            log(f"built {out.name} in {time.monotonic() - start:.0f} s")
        for old in prune_stale(out):
            log(f"removed {old.name}: an older build not used for a day")
        return out
    except Timeout:
        raise ImageBuildError(f"{lock.lock_file}: another build holds the lock for over {LOCK_TIMEOUT_S}s; "
                              "remove the lock file if no build is running") from None


def prune_stale(out: Path, max_age_s: float = PRUNE_AFTER_S) -> list[Path]:
    """Remove finished siblings of `out` (same name, other key) unused for `max_age_s`; what was removed.

    A sibling whose lock another process holds (being built or rebuilt) is left alone.
    """
    prefix = out.name.rsplit("-", 1)[0] + "-"
    removed = []
    now = time.time()
    for other in out.parent.glob(prefix + "*"):
        marker = other / ".complete"
        if other == out or not other.is_dir() or other.name.count("-") != out.name.count("-"):
            continue
        if not marker.is_file() or now - marker.stat().st_mtime < max_age_s:
            continue
        lock = FileLock(str(other) + ".lock")
        try:
            with lock.acquire(timeout=0):
                shutil.rmtree(other, ignore_errors=True)
                removed.append(other)
        except Timeout:
            continue
    return removed


def run_tool(argv: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    except FileNotFoundError:
        raise ImageBuildError(f"{what}: {argv[0]} not found; install it (Debian: apt-get install {argv[0]})") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc


