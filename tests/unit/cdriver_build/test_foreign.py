"""Building another architecture's bundle: the namespace's binfmt entry, the build root, the wheels, the chroot."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cdriver.checkout import REPO_ROOT
from cdriver_build import build, emulation, foreign, userns
from cdriver_build.platforms import AMD64, ARM64


def test_the_binfmt_entry_matches_aarch64_elf_programs_and_opens_qemu_at_registration() -> None:
    line = userns.registration("/cache/qemu-aarch64-static")
    name, kind, offset, magic, mask, interpreter, flags = line.lstrip(":").split(":")
    assert (name, kind, offset, interpreter, flags) == ("qemu-aarch64", "M", "", "/cache/qemu-aarch64-static", "F")
    magic_bytes = bytes(int(h, 16) for h in magic.split("\\x")[1:])
    mask_bytes = bytes(int(h, 16) for h in mask.split("\\x")[1:])
    assert len(magic_bytes) == len(mask_bytes) == 20
    assert magic_bytes[:4] == b"\x7fELF" and magic_bytes[18:20] == b"\xb7\x00"  # e_machine 183, little-endian
    with pytest.raises(userns.NamespaceError, match="absolute path without ':'"):
        userns.registration("qemu-aarch64-static")


def test_the_build_root_is_debian_of_the_platform_with_python_and_objdump() -> None:
    argv = foreign.root_command(ARM64, foreign.ROOT_PACKAGES, "/t/root")
    assert argv[:3] == ["mmdebstrap", "--arch=arm64", "--variant=minbase"]
    assert "--include=python3,libpython3.11,binutils" in argv and argv[-2:] == ["bookworm", "/t/root"]


def test_the_arm64_base_layer_is_made_from_arm64_packages_and_the_native_one_unchanged() -> None:
    recipe = build.containerfile.load(REPO_ROOT / "Containerfile")
    native = build.mmdebstrap_command(recipe)
    assert build.mmdebstrap_command(recipe, AMD64) == native and not any(a.startswith("--arch") for a in native)
    arm = build.mmdebstrap_command(recipe, ARM64)
    assert arm[1:4] == ["--arch=arm64", "--mode=root", "--skip=check/qemu"] and arm[4:] == native[1:]


def test_the_wheels_are_the_platforms_binary_ones_pinned_to_this_environment(tmp_path: Path) -> None:
    wanted = foreign.requirements(REPO_ROOT / "setup.cfg")
    assert "pyinstaller" in wanted and any(w.startswith("grpcio") for w in wanted)
    assert not any(w.startswith("#") for w in wanted)
    argv = foreign.pip_command(ARM64, tmp_path / "site", tmp_path / "c.txt", wanted)
    assert argv[:4] == [sys.executable, "-m", "pip", "install"] and "--only-binary=:all:" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"] == list(ARM64.pip_platforms)
    assert argv[argv.index("--python-version") + 1] == foreign.PYTHON_VERSION
    pins = foreign.pinned_versions()
    assert any(p.lower().startswith("grpcio==") for p in pins) and not any(p.startswith("cdriver==") for p in pins)


def test_the_chroot_script_binds_the_build_folder_and_site_and_runs_build_sh(tmp_path: Path) -> None:
    script = foreign.chroot_script(Path("/r"), Path("/w"), Path("/s"))
    assert "mount --bind /w /r/build\n" in script and "mount --bind -o ro /s /r/site\n" in script
    assert script.rstrip().endswith("/bin/bash /build/src/packaging/build.sh")
    assert "PYINSTALLER=/build/pyinstaller" in script and "DIST=/build/dist" in script
    foreign.copy_sources(REPO_ROOT, build.BUNDLE_INPUTS, tmp_path)
    assert (tmp_path / "packaging" / "build.sh").is_file() and (tmp_path / "cdriver" / "__init__.py").is_file()
    assert not (tmp_path / "tests").exists()


def test_the_namespace_command_runs_the_userns_script_with_this_python() -> None:
    argv = emulation.in_namespace(Path("/c/qemu-aarch64-static"), ["true"])
    assert argv == [sys.executable, str(Path(userns.__file__).resolve()), "--qemu", "/c/qemu-aarch64-static",
                    "--", "true"]


def test_each_platforms_bundle_has_its_own_cache_key() -> None:
    assert build.bundle_key(REPO_ROOT, AMD64) != build.bundle_key(REPO_ROOT, ARM64)
