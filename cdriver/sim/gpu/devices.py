"""Simulated IMEX channel devices: a node's proc/devices, real char device nodes, capabilities.

A host with the NVIDIA driver lists `nvidia-caps-imex-channels` and `nvidia-caps` in
/proc/devices and has /dev/nvidia-caps-imex-channels/channel<N> (minor N). The simulation
picks majors that are unused on this machine (so its nodes never alias a real device),
renders a proc/devices file for each node's driver root and creates real character device
nodes with mknod.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cdriver.errors import CdriverError
from cdriver.nvml.discover import IMEX_CHANNELS_DEV_DIR, IMEX_CHANNELS_DEVICE_NAME, NVIDIA_CAPS_DEVICE_NAME

FIRST_CANDIDATE_MAJOR = 240  # the kernel's "local/experimental" range starts here
MAX_MAJOR = 4095
CHANNEL_MODE = 0o666

#: The fabric-imex-mgmt capability as the simulated driver reports it.
FABRIC_MGMT_MINOR = 512
FABRIC_MGMT_MODE = 438  # 0o666, written in decimal like the real procfs file
FABRIC_MGMT_MODIFY = 0

_CHAR_HEADER = "Character devices:"
_BLOCK_HEADER = "Block devices:"


#: Used when this machine's /proc/devices cannot be read: a typical host's entries.
FALLBACK_PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  4 ttyS
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
 10 misc
 13 input
 29 fb
128 ptm
136 pts
180 usb
189 usb_device
195 nvidia-frontend
226 drm

Block devices:
  7 loop
  8 sd
 11 sr
259 blkext
"""


def host_proc_devices(path: str = "/proc/devices") -> str:
    """This machine's /proc/devices text (a typical host's when unreadable)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return FALLBACK_PROC_DEVICES
    return text if _CHAR_HEADER in text and _BLOCK_HEADER in text else FALLBACK_PROC_DEVICES


class DeviceError(CdriverError):
    """Bad majors, an unusable proc/devices source, or a device node that cannot be created."""


@dataclass
class ProcDevices:
    """/proc/devices parsed: major -> names, per section."""

    char: dict[int, list[str]] = field(default_factory=dict)
    block: dict[int, list[str]] = field(default_factory=dict)

    def used_majors(self) -> set[int]:
        """Every major bound in either section."""
        return set(self.char) | set(self.block)


def _split_sections(text: str, source: str) -> tuple[str, str]:
    char_at = text.find(_CHAR_HEADER)
    block_at = text.find(_BLOCK_HEADER)
    if char_at < 0 or block_at < 0 or block_at < char_at:
        raise DeviceError(f"{source}: expected a '{_CHAR_HEADER}' section followed by a '{_BLOCK_HEADER}' "
                          "section (the layout of /proc/devices)")
    return text[char_at:block_at], text[block_at:]


def parse_proc_devices(text: str, source: str = "/proc/devices") -> ProcDevices:
    """Parse /proc/devices text into its character and block sections."""
    char_text, block_text = _split_sections(text, source)
    out = ProcDevices()
    for section, table in ((char_text, out.char), (block_text, out.block)):
        for line in section.splitlines()[1:]:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].isdigit():
                table.setdefault(int(parts[0]), []).append(parts[1].strip())
    return out


def choose_majors(source_text: str, count: int = 2, start: int = FIRST_CANDIDATE_MAJOR) -> list[int]:
    """The lowest `count` majors >= `start` bound to nothing in `source_text` (either section)."""
    used = parse_proc_devices(source_text).used_majors()
    chosen = [m for m in range(start, MAX_MAJOR + 1) if m not in used][:count]
    if len(chosen) < count:
        raise DeviceError(f"no {count} unused device majors in {start}..{MAX_MAJOR}")
    return chosen


def render_proc_devices(source_text: str, channel_major: int, caps_major: int, source: str = "/proc/devices",
                        extra: Mapping[int, str] | None = None) -> str:
    """`source_text` with the `nvidia-caps-imex-channels` and `nvidia-caps` entries set.

    `extra` adds more character entries (e.g. {195: "nvidia-frontend"}), listed before the
    two IMEX entries. Earlier entries for any of these names are replaced, so rendering is
    idempotent. Raises DeviceError if a major is out of range, two entries share a major, or
    a major is already bound to another name anywhere in the source.
    """
    entries = dict(extra or {})
    for major, name in ((channel_major, IMEX_CHANNELS_DEVICE_NAME), (caps_major, NVIDIA_CAPS_DEVICE_NAME)):
        if major in entries:
            raise DeviceError(f"major {major} for {name} is also used for {entries[major]}; "
                              "choose different majors")
        entries[major] = name
    for major, name in entries.items():
        if not 1 <= major <= MAX_MAJOR:
            raise DeviceError(f"major {major} for {name} is out of range 1..{MAX_MAJOR}")
    parsed = parse_proc_devices(source_text, source)
    ours = set(entries.values())
    for section, table in (("character", parsed.char), ("block", parsed.block)):
        for major, name in entries.items():
            others = [n for n in table.get(major, []) if n not in ours]
            if others:
                raise DeviceError(f"{source}: major {major} for {name} is already used by {others[0]!r} "
                                  f"({section} devices); choose an unused major (see choose_majors)")
    char_text, block_text = _split_sections(source_text, source)

    def is_ours(line: str) -> bool:
        parts = line.split(None, 1)
        return len(parts) == 2 and parts[0].isdigit() and parts[1].strip() in ours

    body = "\n".join(line for line in char_text.splitlines() if not is_ours(line)).rstrip() + "\n"
    body += "".join(f"{major:3d} {name}\n" for major, name in entries.items())
    return body + "\n" + block_text


def render_capability(minor: int = FABRIC_MGMT_MINOR, mode: int = FABRIC_MGMT_MODE,
                      modify: int = FABRIC_MGMT_MODIFY) -> str:
    """Text of proc/driver/nvidia/capabilities/fabric-imex-mgmt."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: {modify}\n"


def ensure_char_device(path: Path, major: int, minor: int, mode: int = CHANNEL_MODE) -> bool:
    """Make `path` a character device (major, minor) with `mode`; returns True if it was (re)created."""
    want = os.makedev(major, minor)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want:
            if stat.S_IMODE(st.st_mode) != mode:
                path.chmod(mode)
            return False
        if stat.S_ISDIR(st.st_mode):
            raise DeviceError(f"{path}: is a directory, expected a character device; remove it")
        path.unlink()
    try:
        os.mknod(path, mode | stat.S_IFCHR, want)
    except FileExistsError:  # created concurrently by another renderer of this root
        st = path.lstat()
        if not (stat.S_ISCHR(st.st_mode) and st.st_rdev == want):
            raise DeviceError(f"{path}: appeared while being created and is not c {major} {minor}; "
                              "render this driver root from one process at a time") from None
        return False
    except PermissionError:
        raise DeviceError(f"{path}: creating a character device needs root (CAP_MKNOD); "
                          "run the simulation as root") from None
    except OSError as exc:
        raise DeviceError(f"{path}: mknod c {major} {minor} failed: {exc}") from None
    path.chmod(mode)  # mknod honours the umask
    return True


def create_channel_nodes(dev_dir: Path, major: int, count: int) -> list[Path]:
    """Create dev/nvidia-caps-imex-channels/channel0..count-1 (minor = index) under `dev_dir`.

    Idempotent: correct nodes are kept, wrong ones replaced, channels at or above `count`
    removed.
    """
    if count < 1:
        raise DeviceError(f"channel count {count} must be at least 1")
    channel_dir = dev_dir / Path(IMEX_CHANNELS_DEV_DIR).name
    channel_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = channel_dir / f"channel{index}"
        ensure_char_device(path, major, index)
        paths.append(path)
    for extra in channel_dir.glob("channel*"):
        suffix = extra.name[len("channel"):]
        if suffix.isdigit() and int(suffix) >= count:
            extra.unlink()
    return paths


def create_caps_node(dev_dir: Path, caps_major: int, minor: int = FABRIC_MGMT_MINOR) -> Path:
    """Create dev/nvidia-caps/nvidia-cap<minor>, the fabric-imex-mgmt capability device."""
    caps_dir = dev_dir / "nvidia-caps"
    caps_dir.mkdir(parents=True, exist_ok=True)
    path = caps_dir / f"nvidia-cap{minor}"
    ensure_char_device(path, caps_major, minor, 0o400)
    return path
