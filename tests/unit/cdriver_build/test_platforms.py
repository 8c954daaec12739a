"""The driver image's platforms: parsing the --platform list, and reading an executable's ELF machine."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from cdriver_build import platforms


def elf_header(machine: int, byteorder: str = "<", data: int = 1) -> bytes:
    ident = b"\x7fELF" + bytes([2, data, 1]) + bytes(9)
    return ident + struct.pack(byteorder + "HH", 2, machine) + bytes(44)


def test_the_platform_list_is_parsed_in_index_order_without_repeats() -> None:
    assert platforms.parse("linux/arm64,linux/amd64") == [platforms.AMD64, platforms.ARM64]
    assert platforms.parse("arm64") == [platforms.ARM64]
    assert platforms.parse("all") == platforms.parse("amd64, arm64, linux/amd64")
    with pytest.raises(platforms.PlatformError, match="unknown platform 'linux/riscv64'"):
        platforms.parse("linux/amd64,linux/riscv64")
    with pytest.raises(platforms.PlatformError, match="no platform given"):
        platforms.parse(" , ")


def test_the_elf_machine_is_read_from_the_header(tmp_path: Path) -> None:
    arm = tmp_path / "arm"
    arm.write_bytes(elf_header(platforms.EM_AARCH64))
    assert platforms.elf_machine(arm) == 183 and platforms.of_executable(arm) == platforms.ARM64
    big = tmp_path / "big"
    big.write_bytes(elf_header(22, ">", 2))  # s390x: big-endian
    assert platforms.elf_machine(big) == 22
    with pytest.raises(platforms.PlatformError, match="machine 22, not one of"):
        platforms.of_executable(big)
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(platforms.PlatformError, match="is not an ELF file"):
        platforms.elf_machine(script)


def test_this_machines_interpreter_is_of_the_native_platform() -> None:
    assert platforms.of_executable(Path(sys.executable).resolve()) == platforms.native()
