"""Build the local cluster's images without a container engine or a registry.

Three images, each an OCI archive that `ctr -n k8s.io images import --local` loads:

    cdriver   localhost/cdriver:v<version>  the Containerfile's recipe, realised here: a Debian
                                            root file system made with mmdebstrap from Debian's
                                            packages, plus the packaged pyinstaller bundle
    pause     localhost/pause:<version>     a static pause program (packaging/pause/pause.c)
    workload  localhost/workload:<version>  busybox from Debian's busybox-static package

Each is cached in ``${XDG_CACHE_HOME:-~/.cache}/cdriver/images-<name>-<hash>/<name>.tar``,
keyed by a hash of its inputs (sources, recipe, this builder). Builders serialise on
``<dir>.lock``; a finished build has ``<dir>/.complete`` and appears by rename, never half
written. The Debian root file system is cached the same way (``images-base-<suite>-<hash>``)
so a source change only rebuilds the bundle and its layer. The pyinstaller bundle itself is
cached too (``bundle-<hash>``, keyed by its sources alone): `make binary` copies it into dist/,
so the executable is packaged once for both.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock, Timeout

import cdriver
from cdriver.sim.images.refs import (
    IMAGE_NAMES,
    PAUSE_VERSION,
    WORKLOAD_VERSION,
    ImageArchive,
    ImageBuildError,
    image_ref,
)
from cdriver_build import containerfile, oci

__all__ = ["IMAGE_NAMES", "PAUSE_VERSION", "WORKLOAD_VERSION", "ImageArchive", "ImageBuildError", "ensure_bundle",
           "ensure_images", "image_ref", "install_bundle"]

WORKLOAD_SUITE = "bookworm"
WORKLOAD_PACKAGE = "busybox-static"
#: bump to rebuild every cached image after a change of how images are put together
BUILDER_REVISION = "1"
#: the same for the Debian base layer alone (its key is otherwise the mmdebstrap command)
BASE_REVISION = "1"
LOCK_TIMEOUT_S = 3600
#: a cached image of an older source that has not been rebuilt for this long is removed
#: after a new one of the same name is built (each source change adds a driver archive)
PRUNE_AFTER_S = 24 * 3600
ENV_PYINSTALLER = "PYINSTALLER"
#: paths under the source root whose contents go into the driver image (the build stage also
#: copies README.md, which setup.cfg names as the package's readme but the bundle does not hold)
DRIVER_INPUTS = ("Containerfile", "pyproject.toml", "setup.cfg", "packaging", "cdriver")
#: what the pyinstaller bundle is made of (the build stage's COPY lines)
BUNDLE_INPUTS = ("pyproject.toml", "setup.cfg", "packaging", "cdriver")
#: mmdebstrap's hook that merges /usr with directory links, as Debian's container images do
#: (without it mmdebstrap installs usrmerge, which pulls perl into the image)
MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr"
#: what a `-slim` Debian image leaves out (documentation, manuals, translations)
SLIM_DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)


def cache_root() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/cdriver`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cdriver"


def source_root() -> Path:
    """The source tree this builder runs from (the images need its Containerfile and packaging/)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "Containerfile").is_file() or not (root / "packaging" / "build.sh").is_file():
        raise ImageBuildError(f"{root} is not a cdriver source tree (no Containerfile or packaging/build.sh): "
                              "build images from a checkout with `make images`")
    return root


# --------------------------------------------------------------------------------------
# Cache keys
# --------------------------------------------------------------------------------------

def _builder_files() -> list[Path]:
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


def _run(argv: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    except FileNotFoundError:
        raise ImageBuildError(f"{what}: {argv[0]} not found; install it (Debian: apt-get install {argv[0]})") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc


def _apt_install(package: str, command: str, log: Callable[[str], None]) -> None:
    """Install a Debian package that provides `command` if it is missing (as root)."""
    if shutil.which(command):
        return
    log(f"{command} not found: installing Debian's {package}")
    if not _apt_has(package):
        _run(["apt-get", "update", "-qq"], "apt-get update")
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package], f"installing {package}",
         env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def _apt_has(package: str) -> bool:
    proc = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True)
    return proc.returncode == 0 and bool(proc.stdout.strip())


# --------------------------------------------------------------------------------------
# The Debian base layer (the Containerfile's final-stage FROM and apt-get install)
# --------------------------------------------------------------------------------------

def mmdebstrap_command(recipe: containerfile.Recipe) -> list[str]:
    """The mmdebstrap call that makes the recipe's base: a minbase Debian with its packages, to stdout."""
    argv = ["mmdebstrap", "--variant=minbase", "--quiet", f"--hook-dir={MERGED_USR_HOOK}"]
    if recipe.packages:
        argv.append("--include=" + ",".join(recipe.packages))
    if recipe.slim:
        argv += [f"--dpkgopt={opt}" for opt in SLIM_DPKG_OPTIONS]
    return argv + [recipe.suite, "-"]


def base_layer(recipe: containerfile.Recipe, log: Callable[[str], None]) -> oci.Layer:
    """The cached Debian root file system layer of `recipe`."""
    argv = mmdebstrap_command(recipe)
    key = input_hash([BASE_REVISION, *argv], [])
    out = cache_root() / f"images-base-{recipe.suite}-{key}"

    def build(tmp: Path) -> None:
        _apt_install("mmdebstrap", "mmdebstrap", log)
        extra = ", ".join(recipe.packages) or "no extra packages"
        log(f"making the Debian {recipe.suite} root file system with {extra} (mmdebstrap, a few minutes cold)")
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(oci.EPOCH)}
        errors = tmp / "mmdebstrap.log"
        with open(errors, "w") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
            assert proc.stdout is not None
            try:
                layer = oci.rewrite_layer(proc.stdout, tmp / "layer.tar", f"debian:{recipe.suite} {' '.join(argv)}",
                                          drop=["dev", "proc", "sys"])
            except tarfile.TarError as e:
                proc.kill()
                proc.wait()
                raise ImageBuildError(f"mmdebstrap output is not a tar ({e}); its log:\n{errors.read_text()[-3000:]}") \
                    from None
            if proc.wait() != 0:
                raise ImageBuildError(f"mmdebstrap failed (exit {proc.returncode}): {' '.join(argv)}\n"
                                      f"{errors.read_text()[-3000:]}")
        (tmp / "layer.json").write_text(json.dumps(layer.descriptor.to_json()))

    done = cached(out, build, log)
    desc = json.loads((done / "layer.json").read_text())
    return oci.Layer(done / "layer.tar", oci.Descriptor(desc["mediaType"], desc["digest"], desc["size"]),
                     f"debian:{recipe.suite} {' '.join(argv)}")


# --------------------------------------------------------------------------------------
# The three images
# --------------------------------------------------------------------------------------

def _bundle(root: Path, dist: Path, log: Callable[[str], None]) -> None:
    """Run the build stage: packaging/build.sh into `dist`."""
    pyinstaller = os.environ.get(ENV_PYINSTALLER) or str(Path(sys.executable).parent / "pyinstaller")
    if not os.access(pyinstaller, os.X_OK):
        raise ImageBuildError(f"pyinstaller not found at {pyinstaller}: run `make venv` (it installs the dev "
                              f"extras) or set {ENV_PYINSTALLER}")
    log("packaging the cdriver bundle with pyinstaller (packaging/build.sh, a few minutes cold)")
    _run([str(root / "packaging" / "build.sh")], "packaging/build.sh", cwd=root,
         env={**os.environ, ENV_PYINSTALLER: pyinstaller, "DIST": str(dist),
              "WORKPATH": str(dist.parent / "pyinstaller-work")})


def ensure_bundle(log: Callable[[str], None]) -> Path:
    """The packaged bundle of this source tree, built once per content of its sources (cached):
    a folder holding ``cdriver-bundle/`` and the ``cdriver`` link, as packaging/build.sh leaves dist/."""
    root = source_root()
    key = input_hash([BUILDER_REVISION, platform.python_version()], files_under(root, BUNDLE_INPUTS), root)

    def build(tmp: Path) -> None:
        _bundle(root, tmp / "dist", log)
        shutil.rmtree(tmp / "pyinstaller-work", ignore_errors=True)

    return cached(cache_root() / f"bundle-{key}", build, log) / "dist"


def install_bundle(dest: Path, log: Callable[[str], None]) -> Path:
    """Put the cached bundle in `dest` (``dest/cdriver-bundle`` and the ``dest/cdriver`` link); the executable."""
    bundle = ensure_bundle(log)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest / "cdriver-bundle", ignore_errors=True)
    shutil.copytree(bundle / "cdriver-bundle", dest / "cdriver-bundle", symlinks=True)
    link = dest / "cdriver"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to("cdriver-bundle/cdriver")
    return link


def app_entries(recipe: containerfile.Recipe, root: Path, dist: Path) -> list[oci.Entry]:
    """The final stage's COPY and `ln -s` steps as layer entries (COPY from the build stage)."""
    entries: list[oci.Entry] = []
    for step in recipe.steps:
        if isinstance(step, containerfile.Symlink):
            entries.append(oci.Entry.symlink(step.link, step.target))
            continue
        rel = containerfile.source_in_build(recipe, step.source)
        source = dist / rel[len("dist/"):] if rel.startswith("dist/") else root / rel
        if source.is_dir():
            entries += oci.tree_entries(source, step.dest)
        elif source.is_file():
            entries.append(oci.Entry.host_file(step.dest, source))
        else:
            raise ImageBuildError(f"COPY --from={step.stage} {step.source}: {source} does not exist after the build")
    return entries


def build_driver(log: Callable[[str], None]) -> ImageArchive:
    root = source_root()
    recipe = containerfile.load(root / "Containerfile")
    ref = image_ref("cdriver")
    key = input_hash([BUILDER_REVISION, ref, platform.python_version()], files_under(root, DRIVER_INPUTS), root)
    base = base_layer(recipe, log)

    def build(tmp: Path) -> None:
        dist = ensure_bundle(log)
        app = oci.write_layer(app_entries(recipe, root, dist), tmp / "app-layer.tar",
                              "COPY --from=build and RUN ln -s of the Containerfile")
        config = oci.ImageConfig(entrypoint=recipe.entrypoint, cmd=recipe.cmd,
                                 env={"PATH": oci.DEFAULT_PATH, **recipe.env}, working_dir=recipe.workdir,
                                 labels={"org.opencontainers.image.version": cdriver.__version__,
                                         "org.opencontainers.image.title": "cdriver"})
        oci.write_archive(tmp / "cdriver.tar", ref, config, [base, app])
        (tmp / "app-layer.tar").unlink()

    out = cached(cache_root() / f"images-cdriver-{key}", build, log)
    return ImageArchive("cdriver", ref, out / "cdriver.tar")


def build_pause(log: Callable[[str], None]) -> ImageArchive:
    root = source_root()
    source = root / "packaging" / "pause" / "pause.c"
    cc = os.environ.get("CC", "gcc")
    argv = [cc, "-static", "-O2", "-s", f'-DPAUSE_VERSION="{PAUSE_VERSION}"', "-o"]
    ref = image_ref("pause")
    key = input_hash([BUILDER_REVISION, ref, *argv], [source, *_builder_files()])

    def build(tmp: Path) -> None:
        exe = tmp / "pause"
        _run([*argv, str(exe), str(source)], "compiling the pause program (needs gcc and the static C library, "
             "Debian: libc6-dev)")
        layer = oci.write_layer([oci.Entry.host_file("pause", exe, 0o755)], tmp / "layer.tar", "pause")
        oci.write_archive(tmp / "pause.tar", ref, oci.ImageConfig(entrypoint=["/pause"]), [layer])
        exe.unlink()
        (tmp / "layer.tar").unlink()

    out = cached(cache_root() / f"images-pause-{key}", build, log)
    return ImageArchive("pause", ref, out / "pause.tar")


PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"


def busybox_entries(busybox: Path, applets: list[str]) -> list[oci.Entry]:
    """/bin/busybox, a link per applet (paths as `busybox --list-full` prints them) and the usual directories."""
    entries = [oci.Entry.host_file("bin/busybox", busybox, 0o755), oci.Entry.directory("tmp", 0o1777),
               oci.Entry.directory("root", 0o700), oci.Entry.directory("etc"),
               oci.Entry.file("etc/passwd", PASSWD),
               oci.Entry.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")]
    for applet in sorted(set(applets)):
        path = applet.strip().lstrip("/")
        if not path or path == "bin/busybox":
            continue
        depth = path.count("/")
        entries.append(oci.Entry.symlink(path, "../" * depth + "bin/busybox"))
    return entries


def build_workload(log: Callable[[str], None]) -> ImageArchive:
    ref = image_ref("workload")
    key = input_hash([BUILDER_REVISION, ref, WORKLOAD_SUITE, WORKLOAD_PACKAGE], _builder_files())

    def build(tmp: Path) -> None:
        if not _apt_has(WORKLOAD_PACKAGE):
            _run(["apt-get", "update", "-qq"], "apt-get update")
        _run(["apt-get", "download", "-qq", WORKLOAD_PACKAGE], f"downloading Debian's {WORKLOAD_PACKAGE}", cwd=tmp)
        debs = sorted(tmp.glob(f"{WORKLOAD_PACKAGE}_*.deb"))
        if not debs:
            raise ImageBuildError(f"apt-get download {WORKLOAD_PACKAGE} left no .deb in {tmp}")
        _run(["dpkg-deb", "-x", str(debs[0]), str(tmp / "pkg")], f"unpacking {debs[0].name}")
        busybox = tmp / "pkg" / "bin" / "busybox"
        applets = _run([str(busybox), "--list-full"], "listing busybox applets").stdout.split()
        layer = oci.write_layer(busybox_entries(busybox, applets), tmp / "layer.tar", debs[0].name)
        oci.write_archive(tmp / "workload.tar", ref, oci.ImageConfig(cmd=["sh"]), [layer])
        for leftover in (*debs, tmp / "layer.tar"):
            leftover.unlink()
        shutil.rmtree(tmp / "pkg")

    out = cached(cache_root() / f"images-workload-{key}", build, log)
    return ImageArchive("workload", ref, out / "workload.tar")


BUILDERS: dict[str, Callable[[Callable[[str], None]], ImageArchive]] = {
    "cdriver": build_driver,
    "pause": build_pause,
    "workload": build_workload,
}


def ensure_images(names: Iterable[str] = IMAGE_NAMES,
                  log: Callable[[str], None] | None = None) -> dict[str, ImageArchive]:
    """Build (or find cached) the named images; {name: ImageArchive}. ImageBuildError on failure."""
    say = log or (lambda msg: print(f"[images] {msg}", file=sys.stderr))
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in BUILDERS]
    if unknown:
        raise ImageBuildError(f"unknown image {', '.join(unknown)}: choose from {', '.join(IMAGE_NAMES)}")
    return {name: BUILDERS[name](say) for name in wanted}

