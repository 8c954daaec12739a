"""Build the simulated libnvidia-ml.so.1 with the C compiler on first use, into a cache.

The cache directory is keyed by a hash of the C sources and the compiler command, so a
changed source builds a new library and an unchanged one is never rebuilt. Concurrent
builders serialise on a file lock; the library appears by atomic rename, never half-written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from filelock import FileLock, Timeout

from cdriver.atomic import atomic_path
from cdriver.errors import CdriverError

LIBRARY_NAME = "libnvidia-ml.so.1"
SOURCE_DIR = Path(__file__).resolve().parent / "nvml"
SOURCES = ("nvml_sim.c",)
HEADERS = ("nvml_sim.h",)
# -Bsymbolic: calls inside the library bind to itself, so two copies loaded in one process
# (two driver roots) never run each other's code.
CFLAGS = ("-shared", "-fPIC", "-O2", "-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden",
          f"-Wl,-soname,{LIBRARY_NAME}", "-Wl,-Bsymbolic")
LIBS = ("-ldl", "-pthread")
BUILD_TIMEOUT_S = 120
LOCK_TIMEOUT_S = 300


class NvmlBuildError(CdriverError):
    """The simulated NVML library could not be built."""


def cache_root() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/cdriver`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cdriver"


#: Debian's cross compiler of each platform's library, and the packages that provide it
CROSS_COMPILERS = {"linux/arm64": "aarch64-linux-gnu-gcc", "linux/amd64": "x86_64-linux-gnu-gcc"}
CROSS_PACKAGES = {"linux/arm64": ("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"),
                  "linux/amd64": ("gcc-x86-64-linux-gnu", "libc6-dev-amd64-cross")}


def compiler() -> str:
    """The C compiler to use: $CC, else gcc."""
    return os.environ.get("CC") or "gcc"


def cross_compiler(platform: str) -> str:
    """The C compiler of `platform`'s library (``linux/arm64``), installing Debian's cross compiler
    when it is missing (as root; NvmlBuildError naming the packages when that fails)."""
    if platform not in CROSS_COMPILERS:
        raise NvmlBuildError(f"no cross compiler known for {platform}: use one of {', '.join(CROSS_COMPILERS)}")
    cc = CROSS_COMPILERS[platform]
    if shutil.which(cc) is None:
        argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *CROSS_PACKAGES[platform]]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if proc.returncode != 0 or shutil.which(cc) is None:
            raise NvmlBuildError(f"{cc} not found and `{' '.join(argv)}` failed (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()[-1000:]}")
    return cc


def source_hash(cc: str | None = None) -> str:
    """Hash of the C sources, headers and build command (16 hex digits)."""
    digest = hashlib.sha256()
    for name in SOURCES + HEADERS:
        path = SOURCE_DIR / name
        try:
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        except OSError as exc:
            raise NvmlBuildError(f"{path}: simulated NVML source missing ({exc}); reinstall cdriver") from None
    digest.update(" ".join((cc or compiler(),) + CFLAGS + LIBS).encode())
    return digest.hexdigest()[:16]


def library_path(cache_dir: Path | None = None) -> Path:
    """Where the library for the current sources lives (built or not)."""
    return (cache_dir or cache_root()) / f"nvml-{source_hash()}" / LIBRARY_NAME


def ensure_libnvml(cache_dir: Path | None = None, cc: str | None = None) -> Path:
    """Return the cached simulated libnvidia-ml.so.1, building it first if needed (with `cc`, else
    `compiler()`: another architecture's library comes from that architecture's cross compiler)."""
    cc = cc or compiler()
    target = (cache_dir or cache_root()) / f"nvml-{source_hash(cc)}" / LIBRARY_NAME
    if target.is_file():
        return target
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target.parent) + ".lock")
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT_S):
            if target.is_file():  # built by another process while we waited
                return target
            _build(cc, target)
    except Timeout:
        raise NvmlBuildError(f"{lock.lock_file}: another build holds the lock for over {LOCK_TIMEOUT_S}s; "
                             "remove the lock file if no build is running") from None
    return target


def _build(cc: str, target: Path) -> None:
    if shutil.which(cc) is None:
        raise NvmlBuildError(f"C compiler {cc!r} not found; the simulated NVML library is built on first use. "
                             "Install gcc (e.g. `apt-get install gcc`) or set CC to a C compiler.")
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target, mode=0o755) as tmp:
        argv = [cc, *CFLAGS, "-o", str(tmp), *(str(SOURCE_DIR / s) for s in SOURCES), *LIBS]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise NvmlBuildError(f"building the simulated NVML library took over {BUILD_TIMEOUT_S}s: "
                                 f"{' '.join(argv)}") from None
        if proc.returncode != 0:
            raise NvmlBuildError(f"building the simulated NVML library failed (exit {proc.returncode}): "
                                 f"{' '.join(argv)}\n{proc.stderr.strip()}")
