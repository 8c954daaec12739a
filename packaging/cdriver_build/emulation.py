"""Run arm64 programs on an x86-64 machine: Debian's qemu-user-static, and the namespace that uses it.

`ensure_qemu` fetches Debian's ``qemu-user-static`` package (``apt-get download``, unpacked
with ``dpkg-deb -x``: nothing is installed) and keeps its ``qemu-aarch64-static`` in the cache,
keyed by the package's version. `in_namespace` is the command line that runs a command in a
user+mount namespace with its own binfmt_misc entry for that emulator (`cdriver_build.userns`):
the machine's binfmt_misc stays as it was.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from cdriver.sim.images.refs import ImageBuildError
from cdriver_build import userns
from cdriver_build.cache import cache_root, cached, input_hash, run_tool

QEMU_PACKAGE = "qemu-user-static"
QEMU_BINARY = "qemu-aarch64-static"


def candidate_version(package: str) -> str:
    """The version `apt-get download package` would fetch ("" when apt knows no such package)."""
    proc = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Candidate" and value.strip() not in ("", "(none)"):
            return value.strip()
    return ""


def ensure_qemu(log: Callable[[str], None]) -> Path:
    """The cached `qemu-aarch64-static` of Debian's qemu-user-static package."""
    version = candidate_version(QEMU_PACKAGE)
    if not version:
        run_tool(["apt-get", "update", "-qq"], "apt-get update")
        version = candidate_version(QEMU_PACKAGE)
    if not version:
        raise ImageBuildError(f"apt knows no {QEMU_PACKAGE} package: arm64 programs cannot be emulated here")
    out = cache_root() / f"qemu-user-static-{input_hash([version], [])}"

    def build(tmp: Path) -> None:
        log(f"fetching Debian's {QEMU_PACKAGE} {version} (apt-get download; nothing is installed)")
        run_tool(["apt-get", "download", "-qq", f"{QEMU_PACKAGE}={version}"], f"downloading {QEMU_PACKAGE}",
                 cwd=tmp)
        debs = sorted(tmp.glob(f"{QEMU_PACKAGE}_*.deb"))
        if not debs:
            raise ImageBuildError(f"apt-get download {QEMU_PACKAGE} left no .deb in {tmp}")
        run_tool(["dpkg-deb", "-x", str(debs[0]), str(tmp / "pkg")], f"unpacking {debs[0].name}")
        shutil.move(tmp / "pkg" / "usr" / "bin" / QEMU_BINARY, tmp / QEMU_BINARY)
        (tmp / "version").write_text(version + "\n")
        shutil.rmtree(tmp / "pkg")
        debs[0].unlink()

    return cached(out, build, log) / QEMU_BINARY


def in_namespace(qemu: Path, argv: list[str]) -> list[str]:
    """The command line that runs `argv` where AArch64 programs run through `qemu` (see cdriver_build.userns)."""
    # run as a script (it needs the standard library only), so no module path has to be passed on
    return [sys.executable, str(Path(userns.__file__).resolve()), "--qemu", str(qemu), "--", *argv]
