"""Node discovery for the kubelet plugin: IMEX channel major, fabric clique ID, driver version.

Everything is read below the driver root (NVIDIA_DRIVER_ROOT as this process sees it):

- majors from `<root>/proc/devices` (falling back to the kernel's /proc/devices when the
  driver root has no proc/devices, as with a containerised driver install);
- NVML from the first `libnvidia-ml.so.1` in the root's library directories, loaded through
  pynvml (which itself only knows the bare library name, so the resolved file is bound into
  pynvml explicitly before nvmlInit).

NVML is process-global: one driver root per process. Each query runs in its own
init/shutdown session, as the upstream driver does.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from cdriver.errors import CdriverError
from cdriver.featuregates import CRASH_ON_NVLINK_FABRIC_ERRORS as _GATE

NVML_LIBRARY_NAME = "libnvidia-ml.so.1"
#: Where libnvidia-ml.so.1 is looked up below a driver root, in order.
NVML_LIBRARY_SEARCH_DIRS = ("/", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                            "/lib64", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu")
NVIDIA_SMI_BINARY = "nvidia-smi"
#: Where nvidia-smi is looked up below a driver root, in order.
NVIDIA_SMI_SEARCH_DIRS = ("/", "/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
PROC_DEVICES_PATH = "/proc/devices"
#: GPUs with these names are not counted (display devices of DGX stations).
NVML_IGNORED_GPU_NAMES = ("DGX Display", "NVIDIA DGX Display")
IMEX_CHANNELS_DEVICE_NAME = "nvidia-caps-imex-channels"  # /proc/devices entry
NVIDIA_CAPS_DEVICE_NAME = "nvidia-caps"
FABRIC_MGMT_CAP_PATH = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
IMEX_CHANNELS_DEV_DIR = "/dev/nvidia-caps-imex-channels"
IMEX_CHANNEL_COUNT = 2048  # channels per node (fixed by the NVIDIA driver)


def channel_device_path(channel: int) -> str:
    """Container path of IMEX channel N."""
    return f"{IMEX_CHANNELS_DEV_DIR}/channel{channel}"

log = logging.getLogger(__name__)

# NVML constants (nvml.h), kept here so pure code need not import pynvml.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_INIT_FLAG_NO_GPUS = 1
FABRIC_STATE_NOT_SUPPORTED = 0
FABRIC_STATE_NOT_STARTED = 1
FABRIC_STATE_IN_PROGRESS = 2
FABRIC_STATE_COMPLETED = 3
FABRIC_STATE_NAMES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
HEALTH_SUMMARY_UNHEALTHY = 2

_CHAR_HEADER = "Character devices:"
_BLOCK_HEADER = "Block devices:"


class NvmlError(CdriverError):
    """NVML could not be found, loaded, initialised or queried."""


class FabricError(NvmlError):
    """The NVLink fabric is not in a state this node may start with (strict discovery)."""


class ProcDevicesError(CdriverError):
    """A device major could not be read from proc/devices."""


class CapabilityError(CdriverError):
    """The fabric-imex-mgmt capability file is missing or malformed."""


# --------------------------------------------------------------------------------------
# proc/devices and capabilities
# --------------------------------------------------------------------------------------

def proc_devices_path(driver_root: str | Path) -> Path:
    """`<root>/proc/devices` if it exists, else the kernel's /proc/devices."""
    candidate = Path(driver_root) / PROC_DEVICES_PATH.lstrip("/")
    return candidate if candidate.is_file() else Path(PROC_DEVICES_PATH)


def parse_device_major(text: str, name: str) -> int | None:
    """Major of the character device `name` in /proc/devices text, or None.

    Only the part between `Character devices:` and `Block devices:` counts; the entry must
    be `<digits> <name>` exactly (not a prefix) and end with a newline.
    """
    start = text.find(_CHAR_HEADER)
    if start < 0:
        return None
    end = text.find(_BLOCK_HEADER, start)
    section = text[start:end if end >= 0 else len(text)]
    for line in section.split("\n")[1:-1]:  # the last piece has no terminating newline
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1] == name:
            major = int(parts[0])
            if major < 2**31:
                return major
    return None


def device_major(driver_root: str | Path, name: str) -> int:
    """Major of character device `name` from the driver root's proc/devices."""
    path = proc_devices_path(driver_root)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProcDevicesError(f"{path}: cannot read ({exc}); is the NVIDIA driver root {driver_root} "
                               "mounted and NVIDIA_DRIVER_ROOT set correctly?") from None
    major = parse_device_major(text, name)
    if major is None:
        raise ProcDevicesError(f"{path}: no character device {name!r}; load the NVIDIA kernel driver with "
                               "IMEX channel support (nvidia-caps-imex-channels) or fix NVIDIA_DRIVER_ROOT")
    return major


def channel_major(driver_root: str | Path) -> int:
    """Major of the IMEX channel devices (`nvidia-caps-imex-channels`)."""
    return device_major(driver_root, IMEX_CHANNELS_DEVICE_NAME)


def caps_major(driver_root: str | Path) -> int:
    """Major of the NVIDIA capability devices (`nvidia-caps`)."""
    return device_major(driver_root, NVIDIA_CAPS_DEVICE_NAME)


@dataclass(frozen=True)
class FabricMgmtCapability:
    """The fabric-imex-mgmt capability device: /dev/nvidia-caps/nvidia-cap<minor>."""

    major: int
    minor: int
    mode: int  # permission bits, as the procfs file gives them (decimal there)
    modify: int

    @property
    def path(self) -> str:
        return f"/dev/nvidia-caps/nvidia-cap{self.minor}"


def parse_capability(text: str, source: str = FABRIC_MGMT_CAP_PATH) -> tuple[int, int, int]:
    """(DeviceFileMinor, DeviceFileMode, DeviceFileModify) from a procfs capability file."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or key.strip() not in ("DeviceFileMinor", "DeviceFileMode", "DeviceFileModify"):
            continue
        try:
            values[key.strip()] = int(value.strip(), 10)
        except ValueError:
            raise CapabilityError(f"{source}: {key.strip()}: {value.strip()!r} is not a decimal integer") from None
    missing = [k for k in ("DeviceFileMinor", "DeviceFileMode") if k not in values]
    if missing:
        raise CapabilityError(f"{source}: missing {', '.join(missing)}; is the NVIDIA driver loaded?")
    return values["DeviceFileMinor"], values["DeviceFileMode"], values.get("DeviceFileModify", 0)


def fabric_mgmt_capability(driver_root: str | Path) -> FabricMgmtCapability:
    """The fabric-imex-mgmt capability (read from the driver root, else the kernel's procfs)."""
    candidate = Path(driver_root) / FABRIC_MGMT_CAP_PATH.lstrip("/")
    path = candidate if candidate.is_file() else Path(FABRIC_MGMT_CAP_PATH)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CapabilityError(f"{path}: cannot read ({exc}); the NVIDIA driver with IMEX support must be "
                              "loaded on a fabric node") from None
    minor, mode, modify = parse_capability(text, str(path))
    return FabricMgmtCapability(caps_major(driver_root), minor, mode, modify)


# --------------------------------------------------------------------------------------
# Files below the driver root
# --------------------------------------------------------------------------------------

def _find_file(driver_root: str | Path, dirs: tuple[str, ...], name: str) -> Path | None:
    for sub in dirs:
        candidate = Path(driver_root) / sub.lstrip("/") / name
        resolved = Path(os.path.realpath(candidate))
        if resolved.is_file():
            return resolved
    return None


def find_library(driver_root: str | Path) -> Path:
    """The driver root's libnvidia-ml.so.1, symlinks resolved; raises NvmlError if absent."""
    found = _find_file(driver_root, NVML_LIBRARY_SEARCH_DIRS, NVML_LIBRARY_NAME)
    if found is None:
        dirs = ", ".join(NVML_LIBRARY_SEARCH_DIRS)
        raise NvmlError(f"{NVML_LIBRARY_NAME} not found below driver root {driver_root} (searched {dirs}); "
                        "set NVIDIA_DRIVER_ROOT to where the NVIDIA driver is installed")
    return found


def find_nvidia_smi(driver_root: str | Path) -> Path | None:
    """The driver root's nvidia-smi, symlinks resolved, or None."""
    return _find_file(driver_root, NVIDIA_SMI_SEARCH_DIRS, NVIDIA_SMI_BINARY)


# --------------------------------------------------------------------------------------
# NVML through pynvml
# --------------------------------------------------------------------------------------

_session_lock = threading.RLock()


def _pynvml() -> Any:
    """The pynvml module (untyped; its library handle is rebound below)."""
    import pynvml

    return pynvml


def bind_library(path: Path) -> None:
    """Make pynvml use the NVML library at `path` (it would otherwise dlopen the bare soname).

    Once loaded, a later dlopen of `libnvidia-ml.so.1` elsewhere in the process also resolves
    to it (the dynamic loader matches already loaded libraries by soname).
    """
    pynvml = _pynvml()
    current = pynvml.nvmlLib
    if current is not None and getattr(current, "_name", None) == str(path):
        return
    if current is not None and getattr(pynvml, "_nvmlLib_refcount", 0) > 0:
        raise NvmlError(f"NVML is already initialised from {getattr(current, '_name', '?')} in this process; "
                        f"cannot switch to {path} (one driver root per process)")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NvmlError(f"{path}: cannot load NVML ({exc}); check that the driver install is complete "
                        "and matches this machine's architecture") from None
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()


def load_library(driver_root: str | Path) -> Path:
    """Find the driver root's NVML and bind it into pynvml; returns the library path."""
    path = find_library(driver_root)
    bind_library(path)
    return path


@contextmanager
def nvml_session(driver_root: str | Path) -> Iterator[ModuleType]:
    """nvmlInitWithFlags(NO_GPUS) on the driver root's NVML ... nvmlShutdown; yields pynvml."""
    pynvml = _pynvml()
    with _session_lock:
        path = load_library(driver_root)
        try:
            pynvml.nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS)
        except pynvml.NVMLError as exc:
            raise NvmlError(f"{path}: nvmlInit failed: {exc}; is the NVIDIA driver loaded on this node?") from None
        try:
            yield pynvml
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.warning("nvmlShutdown failed: %s", exc)


@dataclass(frozen=True)
class GpuFabric:
    """One GPU's fabric registration as NVML reports it."""

    index: int
    uuid: str
    name: str
    result: int  # return code of the fabric info call (NVML_SUCCESS or an error)
    cluster_uuid: str = ""  # canonical 8-4-4-4-12 (all zeros: not multi-node capable)
    clique_id: int = 0
    state: int = FABRIC_STATE_NOT_SUPPORTED
    status: int = NVML_SUCCESS  # registration status (an NVML return code)
    health_mask: int | None = None
    health_summary: int | None = None  # None when the library has no versioned call


def format_cluster_uuid(raw: bytes) -> str:
    """16 bytes as lowercase 8-4-4-4-12."""
    h = bytes(raw).hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_ZERO_UUID = format_cluster_uuid(bytes(16))


def _fabric_info(pynvml: ModuleType, handle: object) -> tuple[int, dict]:
    """(result, fields) of the newest fabric-info call the library answers."""
    for struct_name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
        struct = getattr(pynvml, struct_name, None)
        if struct is None:
            continue
        info = struct()
        try:
            pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if exc.value == NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                continue  # an older library: try the previous version
            if exc.value == NVML_ERROR_FUNCTION_NOT_FOUND:
                break
            return exc.value, {}
        fields = {"cluster_uuid": format_cluster_uuid(bytes(info.clusterUuid)), "clique_id": info.cliqueId,
                  "state": info.state & 0xFF, "status": info.status, "health_mask": info.healthMask}
        if hasattr(info, "healthSummary"):
            fields["health_summary"] = info.healthSummary
        return NVML_SUCCESS, fields
    info = pynvml.c_nvmlGpuFabricInfo_t()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except pynvml.NVMLError as exc:
        return exc.value, {}
    return NVML_SUCCESS, {"cluster_uuid": format_cluster_uuid(bytes(info.clusterUuid)), "clique_id": info.cliqueId,
                          "state": info.state & 0xFF, "status": info.status}


def read_fabric(driver_root: str | Path) -> list[GpuFabric]:
    """Every GPU's fabric registration (display-only GPUs skipped)."""
    with nvml_session(driver_root) as pynvml:
        out: list[GpuFabric] = []
        try:
            count = pynvml.nvmlDeviceGetCount()
            for index in range(count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                name = pynvml.nvmlDeviceGetName(handle)
                if name in NVML_IGNORED_GPU_NAMES:
                    continue
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                result, fields = _fabric_info(pynvml, handle)
                out.append(GpuFabric(index=index, uuid=uuid, name=name, result=result, **fields))
                log.debug("GPU %d (%s): fabric %s", index, uuid, out[-1])
        except pynvml.NVMLError as exc:
            raise NvmlError(f"reading GPUs through NVML failed: {exc}") from None
        return out


def decide_clique_id(gpus: list[GpuFabric], strict: bool = True, tolerate_pending: bool = False) -> str:
    """`<clusterUUID>.<cliqueId>` shared by the fabric-attached GPUs, or "" if there are none.

    Strict (CrashOnNVLinkFabricErrors): a GPU whose fabric registration is not finished or
    failed, or whose fabric health is UNHEALTHY, raises FabricError. Lenient: such GPUs are
    skipped with a warning (an unhealthy but registered GPU still counts). In both modes a
    GPU without fabric support, or with an all-zero cluster UUID, is skipped, and GPUs that
    disagree on the cluster UUID or clique ID raise FabricError.

    ``tolerate_pending`` (FabricManagerPartitioning on a single-node NVLink system): a GPU whose
    registration is not finished is skipped in either mode, since Fabric Manager registers GPUs
    only when a partition holding them is activated.
    """
    found: set[tuple[str, int]] = set()
    for gpu in gpus:
        where = f"GPU {gpu.index} ({gpu.uuid})"
        if gpu.result == NVML_ERROR_NOT_SUPPORTED:
            continue
        if gpu.result != NVML_SUCCESS:
            raise NvmlError(f"{where}: reading GPU fabric info failed with NVML error {gpu.result}")
        if gpu.state == FABRIC_STATE_NOT_SUPPORTED:
            continue
        state_name = FABRIC_STATE_NAMES.get(gpu.state, f"unknown ({gpu.state})")
        problem = None
        if gpu.state != FABRIC_STATE_COMPLETED and tolerate_pending:
            log.info("%s: ignoring incomplete NVLink registration (%s) on a single-node NVLink system "
                     "(FabricManagerPartitioning); no clique from this GPU", where, state_name)
            continue
        if gpu.state != FABRIC_STATE_COMPLETED:
            problem = (f"NVLink fabric registration is {state_name}, not completed; "
                       "wait for nvidia-fabricmanager to finish, then restart")
        elif gpu.status != NVML_SUCCESS:
            problem = (f"NVLink fabric registration failed (status {gpu.status}); "
                       "check nvidia-fabricmanager and the NVLink switches")
        if problem is not None:
            if strict:
                raise FabricError(f"{where}: {problem} (refusing to start; set feature gate "
                                  f"{_GATE}=false to start without a clique instead)")
            log.warning("%s: %s; skipping this GPU", where, problem)
            continue
        if gpu.cluster_uuid in ("", _ZERO_UUID):
            continue  # NVLink, but not multi-node capable
        if gpu.health_summary == HEALTH_SUMMARY_UNHEALTHY:
            problem = f"NVLink fabric health is unhealthy (mask 0x{gpu.health_mask or 0:X})"
            if strict:
                raise FabricError(f"{where}: {problem}; repair the fabric (see nvidia-smi -q) or set "
                                  f"feature gate {_GATE}=false")
            log.warning("%s: %s; using its clique anyway", where, problem)
        found.add((gpu.cluster_uuid, gpu.clique_id))
    if not found:
        return ""
    uuids = sorted({u for u, _ in found})
    cliques = sorted({q for _, q in found})
    if len(uuids) > 1:
        raise FabricError(f"GPUs report different cluster UUIDs ({', '.join(uuids)}); a node must be in one "
                          "NVLink domain")
    if len(cliques) > 1:
        raise FabricError(f"GPUs report different clique IDs ({', '.join(map(str, cliques))}); a node must be in "
                          "one clique")
    return f"{uuids[0]}.{cliques[0]}"


def clique_id(driver_root: str | Path, strict: bool = True, tolerate_pending: bool = False) -> str:
    """This node's clique ID `<clusterUUID>.<cliqueId>`, or "" if it has no NVLink fabric."""
    return decide_clique_id(read_fabric(driver_root), strict, tolerate_pending)


def driver_version(driver_root: str | Path) -> str:
    """The NVIDIA driver version NVML reports (e.g. `580.65.06`)."""
    with nvml_session(driver_root) as pynvml:
        try:
            return str(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as exc:
            raise NvmlError(f"nvmlSystemGetDriverVersion failed: {exc}") from None


def version_tuple(version: str) -> tuple[int, ...]:
    """Numeric components of a dotted version (`570.158.01` -> (570, 158, 1)); raises ValueError."""
    parts = version.strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted numeric version: {version!r}")
    return tuple(int(p) for p in parts)
