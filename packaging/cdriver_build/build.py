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

The driver image is this machine's platform alone by default; given several platforms
(`make image`: linux/amd64 and linux/arm64) it is one image index with an image per platform,
each over Debian's packages and a bundle of its own architecture (``images-base-<suite>-<arch>-``
and ``bundle-<arch>-<hash>`` for another architecture, made under emulation: see `foreign`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

import cdriver
from cdriver.sim.images.refs import (
    IMAGE_NAMES,
    PAUSE_VERSION,
    WORKLOAD_VERSION,
    ImageArchive,
    ImageBuildError,
    image_ref,
)
from cdriver_build import containerfile, emulation, foreign, oci, platforms
from cdriver_build.cache import (
    LOCK_TIMEOUT_S,
    PRUNE_AFTER_S,
    builder_files,
    cache_root,
    cached,
    files_under,
    input_hash,
    prune_stale,
    run_tool,
)
from cdriver_build.platforms import Platform

__all__ = ["IMAGE_NAMES", "LOCK_TIMEOUT_S", "PAUSE_VERSION", "PRUNE_AFTER_S", "WORKLOAD_VERSION", "ImageArchive",
           "ImageBuildError", "cache_root", "cached", "ensure_bundle", "files_under", "input_hash", "prune_stale",
           "ensure_images", "image_ref", "install_bundle"]

WORKLOAD_SUITE = "bookworm"
WORKLOAD_PACKAGE = "busybox-static"
#: bump to rebuild every cached image after a change of how images are put together
BUILDER_REVISION = "1"
#: the same for the Debian base layer alone (its key is otherwise the mmdebstrap command)
BASE_REVISION = "1"
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


def source_root() -> Path:
    """The source tree this builder runs from (the images need its Containerfile and packaging/)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "Containerfile").is_file() or not (root / "packaging" / "build.sh").is_file():
        raise ImageBuildError(f"{root} is not a cdriver source tree (no Containerfile or packaging/build.sh): "
                              "build images from a checkout with `make images`")
    return root


def _apt_install(package: str, command: str, log: Callable[[str], None]) -> None:
    """Install a Debian package that provides `command` if it is missing (as root)."""
    if shutil.which(command):
        return
    log(f"{command} not found: installing Debian's {package}")
    if not _apt_has(package):
        run_tool(["apt-get", "update", "-qq"], "apt-get update")
    run_tool(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package], f"installing {package}",
         env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def _apt_has(package: str) -> bool:
    proc = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True)
    return proc.returncode == 0 and bool(proc.stdout.strip())


# --------------------------------------------------------------------------------------
# The Debian base layer (the Containerfile's final-stage FROM and apt-get install)
# --------------------------------------------------------------------------------------

def mmdebstrap_command(recipe: containerfile.Recipe, target: Platform | None = None) -> list[str]:
    """The mmdebstrap call that makes the recipe's base: a minbase Debian with its packages, to stdout.

    For another architecture than this machine's (`target`), Debian's packages of that
    architecture, set up as root of the emulating namespace (see `foreign`).
    """
    argv = ["mmdebstrap", "--variant=minbase", "--quiet", f"--hook-dir={MERGED_USR_HOOK}"]
    if target is not None and target != platforms.native():
        argv[1:1] = [f"--arch={target.architecture}", "--mode=root", "--skip=check/qemu"]
    if recipe.packages:
        argv.append("--include=" + ",".join(recipe.packages))
    if recipe.slim:
        argv += [f"--dpkgopt={opt}" for opt in SLIM_DPKG_OPTIONS]
    return argv + [recipe.suite, "-"]


def base_layer(recipe: containerfile.Recipe, log: Callable[[str], None], target: Platform | None = None) -> oci.Layer:
    """The cached Debian root file system layer of `recipe` (for `target`, default this machine's platform)."""
    argv = mmdebstrap_command(recipe, target)
    key = input_hash([BASE_REVISION, *argv], [])
    foreign_arch = target is not None and target != platforms.native()
    name = f"{recipe.suite}-{target.architecture}" if foreign_arch and target is not None else recipe.suite
    out = cache_root() / f"images-base-{name}-{key}"

    def build(tmp: Path) -> None:
        _apt_install("mmdebstrap", "mmdebstrap", log)
        extra = ", ".join(recipe.packages) or "no extra packages"
        how = "under emulation, several minutes cold" if foreign_arch else "a few minutes cold"
        log(f"making the Debian {name} root file system with {extra} (mmdebstrap, {how})")
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(oci.EPOCH)}
        command = emulation.in_namespace(emulation.ensure_qemu(log), argv) if foreign_arch else argv
        errors = tmp / "mmdebstrap.log"
        with open(errors, "w") as err:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, env=env)
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
    run_tool([str(root / "packaging" / "build.sh")], "packaging/build.sh", cwd=root,
         env={**os.environ, ENV_PYINSTALLER: pyinstaller, "DIST": str(dist),
              "WORKPATH": str(dist.parent / "pyinstaller-work")})


def bundle_key(root: Path, target: Platform) -> str:
    """The cache key of `target`'s bundle: the build stage's inputs, and what packages them."""
    if target == platforms.native():
        return input_hash([BUILDER_REVISION, platform.python_version()], files_under(root, BUNDLE_INPUTS), root)
    return input_hash([BUILDER_REVISION, foreign.FOREIGN_REVISION, target.name, foreign.PYTHON_VERSION],
                      files_under(root, BUNDLE_INPUTS), root)


#: what a bundle records of the sources it was packaged from (their key and commit)
BUNDLE_RECORD = "inputs.json"


def source_commit(root: Path) -> str:
    """The checkout's commit, with ``+changes`` when its tree differs ("" outside a git checkout)."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return ""
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def bundle_name(key: str, target: Platform) -> str:
    return f"bundle-{key}" if target == platforms.native() else f"bundle-{target.architecture}-{key}"


def ensure_bundle(log: Callable[[str], None], target: Platform | None = None) -> Path:
    """The packaged bundle of this source tree for `target` (default: this machine's platform), built once
    per content of its sources (cached): a folder holding ``cdriver-bundle/`` and the ``cdriver`` link, as
    packaging/build.sh leaves dist/. Another architecture's is packaged under emulation (`foreign`)."""
    root = source_root()
    native = platforms.native()
    chosen = target or native
    key = bundle_key(root, chosen)

    def build(tmp: Path) -> None:
        if chosen == native:
            _bundle(root, tmp / "dist", log)
            shutil.rmtree(tmp / "pyinstaller-work", ignore_errors=True)
        else:
            foreign.build_bundle(chosen, root, BUNDLE_INPUTS, tmp / "dist", log)
        (tmp / "platform").write_text(chosen.name + "\n")
        (tmp / BUNDLE_RECORD).write_text(json.dumps({"sources": key, "commit": source_commit(root)}) + "\n")

    return cached(cache_root() / bundle_name(key, chosen), build, log) / "dist"


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


def _driver_image(recipe: containerfile.Recipe, root: Path, target: Platform, tmp: Path,
                  log: Callable[[str], None]) -> oci.PlatformImage:
    """The driver image of one platform: its Debian base and the application layer over its bundle."""
    base = base_layer(recipe, log, target)
    dist = ensure_bundle(log, target)
    app = oci.write_layer(app_entries(recipe, root, dist), tmp / f"app-layer-{target.architecture}.tar",
                          "COPY --from=build and RUN ln -s of the Containerfile")
    config = oci.ImageConfig(entrypoint=recipe.entrypoint, cmd=recipe.cmd,
                             env={"PATH": oci.DEFAULT_PATH, **recipe.env}, working_dir=recipe.workdir,
                             labels={"org.opencontainers.image.version": cdriver.__version__,
                                     "org.opencontainers.image.title": "cdriver"})
    return oci.PlatformImage(target.architecture, config, [base, app])


def build_driver(log: Callable[[str], None], targets: Iterable[Platform] | None = None) -> ImageArchive:
    """The driver image archive: this machine's platform alone (the default), or an image index of `targets`.

    One platform gives a plain single-image archive; more give an archive whose reference names
    an image index with one manifest per platform, each over the bundle of its own architecture.
    """
    root = source_root()
    recipe = containerfile.load(root / "Containerfile")
    ref = image_ref("cdriver")
    chosen = sorted(set(targets or [platforms.native()]), key=lambda p: platforms.ORDER.index(p.name))
    single = chosen == [platforms.native()]
    parts = [BUILDER_REVISION, ref, platform.python_version()]
    if not single:
        parts += ["platforms", *(p.name for p in chosen), foreign.FOREIGN_REVISION]
    key = input_hash(parts, files_under(root, DRIVER_INPUTS), root)

    def build(tmp: Path) -> None:
        images = [_driver_image(recipe, root, target, tmp, log) for target in chosen]
        if single:
            oci.write_archive(tmp / "cdriver.tar", ref, images[0].config, images[0].layers, images[0].architecture)
        else:
            oci.write_index_archive(tmp / "cdriver.tar", ref, images)
        for layer in tmp.glob("app-layer-*.tar"):
            layer.unlink()

    out = cached(cache_root() / f"images-cdriver-{key}", build, log)
    return ImageArchive("cdriver", ref, out / "cdriver.tar")


def build_pause(log: Callable[[str], None]) -> ImageArchive:
    root = source_root()
    source = root / "packaging" / "pause" / "pause.c"
    cc = os.environ.get("CC", "gcc")
    argv = [cc, "-static", "-O2", "-s", f'-DPAUSE_VERSION="{PAUSE_VERSION}"', "-o"]
    ref = image_ref("pause")
    key = input_hash([BUILDER_REVISION, ref, *argv], [source, *builder_files()])

    def build(tmp: Path) -> None:
        exe = tmp / "pause"
        run_tool([*argv, str(exe), str(source)], "compiling the pause program (needs gcc and the static C library, "
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
    key = input_hash([BUILDER_REVISION, ref, WORKLOAD_SUITE, WORKLOAD_PACKAGE], builder_files())

    def build(tmp: Path) -> None:
        if not _apt_has(WORKLOAD_PACKAGE):
            run_tool(["apt-get", "update", "-qq"], "apt-get update")
        run_tool(["apt-get", "download", "-qq", WORKLOAD_PACKAGE], f"downloading Debian's {WORKLOAD_PACKAGE}", cwd=tmp)
        debs = sorted(tmp.glob(f"{WORKLOAD_PACKAGE}_*.deb"))
        if not debs:
            raise ImageBuildError(f"apt-get download {WORKLOAD_PACKAGE} left no .deb in {tmp}")
        run_tool(["dpkg-deb", "-x", str(debs[0]), str(tmp / "pkg")], f"unpacking {debs[0].name}")
        busybox = tmp / "pkg" / "bin" / "busybox"
        applets = run_tool([str(busybox), "--list-full"], "listing busybox applets").stdout.split()
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


def ensure_images(names: Iterable[str] = IMAGE_NAMES, log: Callable[[str], None] | None = None,
                  targets: Iterable[Platform] | None = None) -> dict[str, ImageArchive]:
    """Build (or find cached) the named images; {name: ImageArchive}. ImageBuildError on failure.

    `targets` are the driver image's platforms (default: this machine's alone; more than one
    makes an image index); the pause and workload images are this machine's.
    """
    say = log or (lambda msg: print(f"[images] {msg}", file=sys.stderr))
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in BUILDERS]
    if unknown:
        raise ImageBuildError(f"unknown image {', '.join(unknown)}: choose from {', '.join(IMAGE_NAMES)}")
    built = {}
    for name in wanted:
        built[name] = build_driver(say, targets) if name == "cdriver" else BUILDERS[name](say)
    return built

