"""The platforms the driver image is built for, and which one an executable is made for.

A platform names itself as OCI does (``linux/amd64``, ``linux/arm64``) and knows its Debian
architecture, the ELF machine of its programs and the pip platform tags of its wheels.
`elf_machine` reads an executable's ELF header, so a test can hold each image's bundle to the
platform its manifest claims.
"""

from __future__ import annotations

import platform as _platform
import struct
from dataclasses import dataclass
from pathlib import Path

from cdriver.errors import CdriverError

EM_X86_64 = 62
EM_AARCH64 = 183
_ELF_MAGIC = b"\x7fELF"


class PlatformError(CdriverError):
    """An unknown platform, or a file that is not an ELF program of a known machine."""


@dataclass(frozen=True)
class Platform:
    """One OS/architecture pair an image is built for."""

    name: str              # OCI form: linux/amd64
    architecture: str      # OCI and Debian architecture: amd64, arm64
    machine: str           # uname -m: x86_64, aarch64
    elf_machine: int       # e_machine of its ELF programs
    pip_platforms: tuple[str, ...]  # pip --platform tags of its binary wheels (glibc 2.36: bookworm)


AMD64 = Platform("linux/amd64", "amd64", "x86_64", EM_X86_64,
                 ("manylinux_2_36_x86_64", "manylinux2014_x86_64"))
ARM64 = Platform("linux/arm64", "arm64", "aarch64", EM_AARCH64,
                 ("manylinux_2_36_aarch64", "manylinux2014_aarch64"))
PLATFORMS: dict[str, Platform] = {p.name: p for p in (AMD64, ARM64)}
#: the order an image index lists its manifests in
ORDER = (AMD64.name, ARM64.name)


def native() -> Platform:
    """The platform of this machine (PlatformError on one images are not built for)."""
    machine = _platform.machine()
    for p in PLATFORMS.values():
        if p.machine == machine:
            return p
    raise PlatformError(f"this machine is {machine}: images are built on {', '.join(PLATFORMS)} only")


def parse(text: str) -> list[Platform]:
    """``linux/amd64,linux/arm64`` (or ``amd64``, ``all``) as platforms, in index order, without repeats."""
    names: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        if word == "all":
            names += ORDER
            continue
        name = word if "/" in word else f"linux/{word}"
        if name not in PLATFORMS:
            raise PlatformError(f"unknown platform {word!r}: choose from {', '.join(PLATFORMS)} (or all)")
        names.append(name)
    if not names:
        raise PlatformError("no platform given")
    return [PLATFORMS[n] for n in ORDER if n in names]


def elf_machine(path: Path) -> int:
    """The e_machine field of an ELF file's header (PlatformError if it is not ELF)."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != _ELF_MAGIC:
        raise PlatformError(f"{path} is not an ELF file")
    byteorder = {1: "<", 2: ">"}.get(head[5])
    if byteorder is None:
        raise PlatformError(f"{path}: ELF data encoding {head[5]} is neither little nor big endian")
    return int(struct.unpack(byteorder + "H", head[18:20])[0])


def of_executable(path: Path) -> Platform:
    """The platform an ELF program is built for (PlatformError for another machine)."""
    machine = elf_machine(path)
    for p in PLATFORMS.values():
        if p.elf_machine == machine:
            return p
    raise PlatformError(f"{path} is an ELF program for machine {machine}, not one of {', '.join(PLATFORMS)}")
