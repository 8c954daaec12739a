"""`check-fabric`: print every GPU's fabric identity as a workload on the node sees it.

Reads NVML through stock pynvml with the v1 fabric call. Output (stdout)::

    Discovered 8 GPU(s)
    GPU 0 (GPU-b200b200-0000-0000-0000-000000000000)
      clusterUuid : 00000000-0000-0000-0000-0000000000ab
      cliqueId    : 0
      state       : completed (3)

A GPU without fabric support prints `GPU <i> (<uuid>): fabric NOT SUPPORTED`. Exit status:
0 every GPU answered, 2 at least one GPU has no fabric support, 1 any other NVML failure.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from cdriver.errors import CdriverError
from cdriver.nvml import discover

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NOT_SUPPORTED = 2


def state_text(state: int) -> str:
    """`completed (3)` etc.; unknown values print as `unknown (<n>)`."""
    return f"{discover.FABRIC_STATE_NAMES.get(state, 'unknown')} ({state})"


def run_check_fabric(out: TextIO, err: TextIO, driver_root: Path | None = None) -> int:
    """Print the fabric report; returns the exit status."""
    import pynvml

    if driver_root is not None:
        try:
            discover.load_library(driver_root)
        except CdriverError as exc:
            err.write(f"nvmlInit: {exc}\n")
            return EXIT_FAILED
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        err.write(f"nvmlInit: {exc}\n")
        return EXIT_FAILED
    try:
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            err.write(f"DeviceGetCount: {exc}\n")
            return EXIT_FAILED
        out.write(f"Discovered {count} GPU(s)\n")
        status = EXIT_OK
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
            except pynvml.NVMLError as exc:
                err.write(f"handle[{index}]: {exc}\n")
                status = EXIT_FAILED
                continue
            info = pynvml.c_nvmlGpuFabricInfo_t()
            try:
                pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
                    out.write(f"GPU {index} ({uuid}): fabric NOT SUPPORTED\n")
                    if status == EXIT_OK:
                        status = EXIT_NOT_SUPPORTED
                else:
                    err.write(f"GetGpuFabricInfo[{index}]: {exc}\n")
                    status = EXIT_FAILED
                continue
            out.write(f"GPU {index} ({uuid})\n"
                      f"  clusterUuid : {discover.format_cluster_uuid(bytes(info.clusterUuid))}\n"
                      f"  cliqueId    : {info.cliqueId}\n"
                      f"  state       : {state_text(info.state & 0xFF)}\n")
        return status
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _smi_init(err: TextIO, driver_root: Path | None) -> bool:
    """Load and initialise NVML as nvidia-smi does; False (reason on `err`) when it cannot."""
    import pynvml

    try:
        if driver_root is not None:
            discover.load_library(driver_root)
        pynvml.nvmlInit()
    except (CdriverError, pynvml.NVMLError) as exc:
        err.write(f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver: {exc}\n")
        return False
    return True


def _smi_run(err: TextIO, driver_root: Path | None, body: Callable[[Any], None]) -> int:
    """Run `body(pynvml)` between NVML's init and shutdown with nvidia-smi's exit status:
    0 done, 9 no NVML, 1 an NVML call failed (the error on `err`)."""
    import pynvml

    if not _smi_init(err, driver_root):
        return 9
    try:
        body(pynvml)
        return 0
    except pynvml.NVMLError as exc:
        err.write(f"nvidia-smi: {exc}\n")
        return 1
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def run_version(out: TextIO, err: TextIO, driver_root: Path | None = None) -> int:
    """`nvidia-smi --version`: the tool's, NVML's and the driver's versions (exit 9 without NVML)."""
    def versions(nvml: Any) -> None:
        driver = nvml.nvmlSystemGetDriverVersion()
        out.write(f"NVIDIA-SMI version  : {driver}\nNVML version        : {nvml.nvmlSystemGetNVMLVersion()}\n"
                  f"DRIVER version      : {driver}\n")

    return _smi_run(err, driver_root, versions)


def run_list_gpus(out: TextIO, err: TextIO, driver_root: Path | None = None) -> int:
    """`nvidia-smi -L` style listing: `GPU <i>: <name> (UUID: <uuid>)`."""
    def listing(nvml: Any) -> None:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            out.write(f"GPU {index}: {nvml.nvmlDeviceGetName(handle)} (UUID: {nvml.nvmlDeviceGetUUID(handle)})\n")

    return _smi_run(err, driver_root, listing)
