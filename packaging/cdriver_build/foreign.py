"""The packaged bundle for another architecture (linux/arm64 on an x86-64 machine), built under emulation.

PyInstaller packages the interpreter and the libraries it runs on, so an arm64 bundle has to
be made by an arm64 Python. Three cached parts, then one emulated run:

- the build root: a Debian root file system of the platform's own packages (mmdebstrap
  ``--arch``; its maintainer scripts run under emulation) with Python and binutils (objdump,
  which PyInstaller's analysis uses);
- the site: the Python packages the bundle holds, the platform's binary wheels fetched and
  unpacked natively (``pip install --target --platform --only-binary=:all:``), at the versions
  this machine's environment has, so both bundles hold the same releases;
- the sources: the build stage's inputs, copied into the build folder;

then ``packaging/build.sh`` runs chrooted in the build root, in a user+mount namespace whose
own binfmt_misc runs AArch64 programs through qemu (`cdriver_build.userns`), with the build
folder and the site bound in. Nothing is registered or mounted on the machine itself.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from cdriver.sim.images.refs import ImageBuildError
from cdriver_build import emulation
from cdriver_build.cache import cache_root, cached, files_under, input_hash, run_tool
from cdriver_build.platforms import Platform

#: bump to rebuild the build roots and sites after a change of how they are made
FOREIGN_REVISION = "1"
SUITE = "bookworm"
#: what the build root holds beyond minbase: the interpreter, its shared library (which the bundle
#: carries) and objdump, which PyInstaller uses
ROOT_PACKAGES = ("python3", "libpython3.11", "binutils")
#: Debian bookworm's Python, which the bundle is packaged with (its wheels are for this version)
PYTHON_VERSION = "3.11"
PYTHON_ABI = "cp311"
#: what is installed into the site beyond the package's own requirements
BUILD_REQUIREMENTS = ("pyinstaller",)
MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr"
#: mount points the build root gets (bound in for each build)
MOUNT_POINTS = ("build", "site")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def root_command(platform: Platform, packages: tuple[str, ...], target: str) -> list[str]:
    """The mmdebstrap call (run inside the emulating namespace) that makes a build or base root of `platform`."""
    argv = ["mmdebstrap", f"--arch={platform.architecture}", "--variant=minbase", "--mode=root", "--quiet",
            # the namespace's own binfmt_misc runs the platform's programs; arch-test is not needed
            "--skip=check/qemu", f"--hook-dir={MERGED_USR_HOOK}"]
    if packages:
        argv.append("--include=" + ",".join(packages))
    return [*argv, SUITE, target]


def ensure_build_root(platform: Platform, log: Callable[[str], None]) -> Path:
    """The cached Debian build root of `platform` (a directory)."""
    key = input_hash([FOREIGN_REVISION, *root_command(platform, ROOT_PACKAGES, "ROOT")], [])
    out = cache_root() / f"buildroot-{platform.architecture}-{key}"

    def build(tmp: Path) -> None:
        qemu = emulation.ensure_qemu(log)
        log(f"making the Debian {SUITE} {platform.architecture} build root with {', '.join(ROOT_PACKAGES)} "
            "(mmdebstrap under emulation, about ten minutes cold)")
        run_tool(emulation.in_namespace(qemu, root_command(platform, ROOT_PACKAGES, str(tmp / "root"))),
                 f"mmdebstrap --arch={platform.architecture}")
        for name in MOUNT_POINTS:
            (tmp / "root" / name).mkdir(exist_ok=True)

    return cached(out, build, log) / "root"


def requirements(setup_cfg: Path) -> list[str]:
    """The package's install_requires (from setup.cfg) plus what the build itself needs."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg)
    lines = parser.get("options", "install_requires", fallback="").splitlines()
    found = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    return [*found, *BUILD_REQUIREMENTS]


def pinned_versions(exclude: tuple[str, ...] = ("cdriver",)) -> list[str]:
    """``name==version`` of every distribution of this Python's environment (pip constraints)."""
    pins = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in exclude:
            pins.add(f"{name}=={dist.version}")
    return sorted(pins, key=str.lower)


def pip_command(platform: Platform, target: Path, constraints: Path, wanted: list[str]) -> list[str]:
    """The native pip call that unpacks `platform`'s binary wheels of `wanted` into `target`."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--target", str(target), "--only-binary=:all:", "--python-version", PYTHON_VERSION,
            "--implementation", "cp", "--abi", PYTHON_ABI, "--abi", "abi3", "--abi", "none"]
    for tag in platform.pip_platforms:
        argv += ["--platform", tag]
    return [*argv, "-c", str(constraints), *wanted]


def ensure_site(platform: Platform, root: Path, log: Callable[[str], None]) -> Path:
    """The cached site-packages of `platform`: the bundle's Python packages, pinned to this environment's."""
    wanted = requirements(root / "setup.cfg")
    pins = pinned_versions()
    key = input_hash([FOREIGN_REVISION, platform.name, PYTHON_VERSION, *wanted, "--", *pins], [])
    out = cache_root() / f"site-{platform.architecture}-{key}"

    def build(tmp: Path) -> None:
        log(f"fetching the {platform.name} wheels of {len(wanted)} requirements (pip, natively)")
        constraints = tmp / "constraints.txt"
        constraints.write_text("".join(p + "\n" for p in pins))
        run_tool(pip_command(platform, tmp / "site", constraints, wanted),
                 f"pip install --platform {platform.pip_platforms[0]}")
        shutil.rmtree(tmp / "site" / "bin", ignore_errors=True)  # scripts with this machine's interpreter

    return cached(out, build, log) / "site"


def copy_sources(root: Path, inputs: tuple[str, ...], dest: Path) -> None:
    """The build stage's COPY lines: the files of `inputs` below `root` into `dest`, same layout."""
    for f in files_under(root, inputs):
        target = dest / f.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)


#: how PyInstaller is started in the build root (its console script names this machine's interpreter)
PYINSTALLER_SHIM = '#!/bin/sh\nexec /usr/bin/python3 -m PyInstaller "$@"\n'
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def chroot_script(build_root: Path, work: Path, site: Path) -> str:
    """The shell script (run in the emulating namespace) that binds the work folder and site in and runs build.sh."""
    r, w, s = (shlex.quote(str(p)) for p in (build_root, work, site))
    env = {"HOME": "/build/home", "PATH": CHROOT_PATH, "PYTHONPATH": "/site", "PYTHONDONTWRITEBYTECODE": "1",
           "PYINSTALLER": "/build/pyinstaller", "DIST": "/build/dist", "WORKPATH": "/build/work",
           "TMPDIR": "/build/tmp", "LC_ALL": "C.UTF-8"}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"set -e\nmount --bind {w} {r}/build\nmount --bind -o ro {s} {r}/site\n"
            f"mount --rbind /dev {r}/dev\nmount --rbind /proc {r}/proc\n"
            f"exec chroot {r} /usr/bin/env -i {assignments} /bin/bash /build/src/packaging/build.sh\n")


def build_bundle(platform: Platform, root: Path, inputs: tuple[str, ...], dist: Path,
                 log: Callable[[str], None]) -> None:
    """Package the bundle of the sources `inputs` below `root` for `platform` into `dist` (build.sh's dist/)."""
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError("mmdebstrap not found: install it (Debian: apt-get install mmdebstrap)")
    qemu = emulation.ensure_qemu(log)
    build_root = ensure_build_root(platform, log)
    site = ensure_site(platform, root, log)
    work = dist.parent
    for name in ("src", "home", "tmp"):
        (work / name).mkdir(parents=True, exist_ok=True)
    copy_sources(root, inputs, work / "src")
    shim = work / "pyinstaller"
    shim.write_text(PYINSTALLER_SHIM)
    shim.chmod(0o755)
    log(f"packaging the {platform.name} cdriver bundle with pyinstaller under emulation (tens of minutes cold)")
    run_tool(emulation.in_namespace(qemu, ["sh", "-c", chroot_script(build_root, work, site)]),
             f"packaging/build.sh for {platform.name} under emulation")
    produced = work / "dist"
    if produced != dist:
        shutil.move(produced, dist)
    for name in ("src", "home", "tmp", "work", "pyinstaller"):
        path = work / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
