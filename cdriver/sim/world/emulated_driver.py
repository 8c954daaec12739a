"""The driver image of another architecture (linux/arm64 on an x86-64 machine), run by simulated nodes.

The nodes ComputeDomains exist for are Grace (arm64) machines. A world started with a
`driver_platform` builds the driver image for that platform (as `cdriver sim images --platform`
does: the arm64 bundle is packaged under emulation), unpacks that platform's image into the
world's directory and maps the chart's image, on every simulated node, to it:

- the container's ``cdriver`` is a script that execs the image's own executable
  (``/opt/cdriver/cdriver``) where a binfmt_misc entry of the container's own user namespace
  hands it to Debian's qemu user-mode emulator (`launch_script`), so the process a node starts,
  signals and measures is the emulator running the role; the emulator's library prefix holds
  the image's C library and nothing else, so every other path the role opens is the node's;
- ``/templates`` is the image's;
- the driver root's stand-ins (``nvidia-imex``, ``nvidia-imex-ctl``, ``check-fabric``) run the
  same executable, and its NVML stand-in is built with the platform's cross compiler, so
  everything the roles load or exec on the node is of the image's architecture, as on a real
  arm64 node.

Nothing is registered in the machine's binfmt_misc. For this machine's own platform the script
runs the image's executable directly.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdriver.errors import CdriverError
from cdriver.sim.images.builder import UnpackedImage
from cdriver.sim.node.simulated.images import ImageContent

#: the packaged executable in the driver image (the Containerfile's install path)
IMAGE_EXECUTABLE = "opt/cdriver/cdriver"
#: the image's files the roles read at fixed paths (container path, path in the image)
IMAGE_FILES = (("/templates", "templates"),)
#: the image's directories the emulator's library prefix holds (Debian merges /lib into /usr/lib)
LIBRARY_DIRS = ("usr/lib",)
LIBRARY_LINKS = (("lib", "usr/lib"),)
KNOWN_PLATFORMS = ("linux/amd64", "linux/arm64")


class EmulatedDriverError(CdriverError):
    """The driver image of the asked platform could not be built or prepared."""


@dataclass(frozen=True)
class EmulatedDriver:
    """One platform's driver image, unpacked and runnable on this machine's simulated nodes."""

    platform: str
    #: the image reference the chart is given (repository:tag)
    ref: str
    #: the image's root file system
    root: Path
    #: the emulator (None: the image is this machine's platform)
    emulator: Path | None
    #: holds the `cdriver` script containers find first on their PATH
    bin_dir: Path

    @property
    def command(self) -> list[str]:
        """What runs the image's executable on a node (the driver root's stand-ins run it too)."""
        return [str(self.bin_dir / "cdriver")]

    def image(self) -> ImageContent:
        """What a simulated node provides for the chart's image."""
        repository = self.ref.rpartition(":")[0]
        files = tuple((target, str(self.root / rel)) for target, rel in IMAGE_FILES)
        return ImageContent(repository, path=(str(self.bin_dir),), files=files)

    def chart_values(self) -> list[str]:
        repository, _, tag = self.ref.rpartition(":")
        return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]


BINFMT_DIR = "/proc/sys/fs/binfmt_misc"


def launch_script(executable: Path, unpacked: UnpackedImage, sysroot: Path | None) -> str:
    """The `cdriver` script: exec the image's executable, under emulation when it is another platform's.

    The executable re-executes itself as it starts (the packaged bootloader does), so naming the
    emulator on one command line is not enough: where no binfmt_misc entry runs the platform's
    programs yet, the script enters a user and mount namespace of its own (``unshare``, mapping
    root to root, no fork), mounts that namespace's own binfmt_misc and registers the emulator
    there, then execs the executable: the pid the node started stays the role's, and the
    machine's binfmt_misc is untouched. The emulator finds the image's C library through
    QEMU_LD_PREFIX.
    """
    exe = shlex.quote(str(executable))
    if unpacked.emulator is None:
        return f'#!/bin/sh\n# cdriver of the unpacked driver image\nexec {exe} "$@"\n'
    assert sysroot is not None
    entry = f"{BINFMT_DIR}/{unpacked.binfmt_entry}"
    register = (f"mount -t binfmt_misc binfmt_misc {BINFMT_DIR} && printf %s \"$1\" > {BINFMT_DIR}/register "
                "&& shift && exec \"$@\"")
    return ("#!/bin/sh\n"
            "# cdriver of the unpacked driver image, run under emulation (see cdriver.sim.world.emulated_driver)\n"
            f"export QEMU_LD_PREFIX={shlex.quote(str(sysroot))}\n"
            f'[ -e {shlex.quote(entry)} ] && exec {exe} "$@"\n'
            f"exec unshare --user --map-root-user --mount /bin/sh -c {shlex.quote(register)} binfmt "
            f'{shlex.quote(unpacked.binfmt)} {exe} "$@"\n')


def make_sysroot(root: Path, dest: Path) -> Path:
    """A library prefix for the emulator holding only the image's library directories (links into `root`)."""
    dest.mkdir(parents=True)
    for rel in LIBRARY_DIRS:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).symlink_to(root / rel)
    for link, target in LIBRARY_LINKS:
        (dest / link).symlink_to(target)
    return dest


def prepare(platform: str, dest: Path, progress: Callable[[str], None]) -> EmulatedDriver:
    """Build (or find cached) the driver image of `platform`, unpack it below `dest` (a new directory)
    and write its launch script; EmulatedDriverError naming the cause on failure."""
    from cdriver.sim.images.builder import build_images, unpack_image
    from cdriver.sim.images.refs import ImageBuildError

    if platform not in KNOWN_PLATFORMS:
        raise EmulatedDriverError(f"unknown driver platform {platform!r}: use one of {', '.join(KNOWN_PLATFORMS)}")
    progress(f"    the {platform} driver image (another architecture's bundle is packaged under emulation: "
             "tens of minutes the first time, cached after)")
    try:
        built = build_images(("cdriver",), progress=lambda line: progress(f"    {line}"), platforms=platform)
        unpacked = unpack_image(built["cdriver"].archive, platform, dest / "root")
    except ImageBuildError as e:
        raise EmulatedDriverError(f"the {platform} driver image could not be prepared: {e}") from e
    executable = unpacked.root / IMAGE_EXECUTABLE
    if not executable.is_file():
        raise EmulatedDriverError(f"the {platform} driver image has no /{IMAGE_EXECUTABLE}")
    if unpacked.emulator is not None and not unpacked.binfmt:
        raise EmulatedDriverError(f"the image unpacker named no binfmt_misc entry for {platform}'s emulator")
    sysroot = make_sysroot(unpacked.root, dest / "sysroot") if unpacked.emulator is not None else None
    bin_dir = dest / "bin"
    bin_dir.mkdir()
    script = bin_dir / "cdriver"
    script.write_text(launch_script(executable, unpacked, sysroot))
    os.chmod(script, 0o755)
    return EmulatedDriver(platform, built["cdriver"].ref, unpacked.root, unpacked.emulator, bin_dir)
