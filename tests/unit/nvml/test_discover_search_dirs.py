"""host-check and the kubelet plugin look for libnvidia-ml.so.1 in the same directories, so
host-check never passes a driver root in which the plugin finds no NVML."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.nvml.discover import NVML_LIBRARY_NAME, NVML_LIBRARY_SEARCH_DIRS, NvmlError, find_library
from cdriver.roles.host_check.facts import find_nvml_library


def plugin_finds(root: Path) -> bool:
    try:
        find_library(root)
    except NvmlError:
        return False
    return True


@pytest.mark.parametrize("subdir", NVML_LIBRARY_SEARCH_DIRS)
def test_both_find_the_library_in_every_search_dir(tmp_path: Path, subdir: str) -> None:
    lib = tmp_path / subdir.lstrip("/") / NVML_LIBRARY_NAME
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(b"\x7fELF")
    assert find_nvml_library(str(tmp_path)) == str(lib)
    assert plugin_finds(tmp_path)


@pytest.mark.parametrize("subdir", ["usr/lib", "lib", "opt/nvidia"])
def test_neither_finds_a_library_outside_the_search_dirs(tmp_path: Path, subdir: str) -> None:
    lib = tmp_path / subdir / NVML_LIBRARY_NAME
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    assert find_nvml_library(str(tmp_path)) is None
    assert not plugin_finds(tmp_path)
