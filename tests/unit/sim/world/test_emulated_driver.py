"""The driver image of another platform on simulated nodes: its launch script, library prefix and
image mapping, and the worlds that can run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cdriver.sim.images.builder import UnpackedImage
from cdriver.sim.node.simulated.images import find_image
from cdriver.sim.world.emulated_driver import EmulatedDriver, launch_script, make_sysroot
from cdriver.sim.world.world import WorldError, WorldSettings

EMULATOR = Path("/cache/qemu-user-static-1/qemu-aarch64-static")
BINFMT = r":qemu-aarch64:M::\x7fELF:\xff\xff:/cache/qemu-user-static-1/qemu-aarch64-static:F"


def test_this_machines_image_is_run_directly(tmp_path: Path) -> None:
    script = tmp_path / "cdriver"
    script.write_text(launch_script(Path("/bin/echo"), UnpackedImage(tmp_path), None))
    script.chmod(0o755)
    out = subprocess.run([str(script), "a b", "c"], capture_output=True, text=True, timeout=10)
    assert out.stdout == "a b c\n", "arguments are passed through unchanged"


def test_another_platforms_image_runs_where_its_own_binfmt_entry_hands_it_to_the_emulator() -> None:
    unpacked = UnpackedImage(Path("/w/root"), EMULATOR, "qemu-aarch64", BINFMT)
    text = launch_script(Path("/w/root/opt/cdriver/cdriver"), unpacked, Path("/w/sysroot"))
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "export QEMU_LD_PREFIX=/w/sysroot" in lines
    # registered already (an enclosing namespace, or the machine's own emulation): exec directly
    assert '[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && exec /w/root/opt/cdriver/cdriver "$@"' in lines
    # else: a user and mount namespace of its own, no fork (no --fork: the pid stays the role's)
    last = lines[-1]
    assert last.startswith("exec unshare --user --map-root-user --mount /bin/sh -c ")
    assert "--fork" not in last and "--pid" not in last
    assert "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc" in last
    assert f"'{BINFMT}'" in last, "the registration line is passed quoted, backslashes intact"
    assert last.endswith('/w/root/opt/cdriver/cdriver "$@"')


def test_the_emulators_library_prefix_holds_only_the_images_libraries(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/lib/aarch64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/ld-linux-aarch64.so.1").write_text("ld")
    (root / "etc").mkdir()
    sysroot = make_sysroot(root, tmp_path / "sysroot")
    assert sorted(p.name for p in sysroot.iterdir()) == ["lib", "usr"]
    assert (sysroot / "lib/ld-linux-aarch64.so.1").read_text() == "ld", "the ELF interpreter's path resolves"
    assert (sysroot / "usr/lib/aarch64-linux-gnu").is_dir()
    assert not (sysroot / "etc").exists(), "the node's /etc stays the one the role reads"


def test_nodes_map_the_charts_image_reference_to_the_unpacked_image() -> None:
    driver = EmulatedDriver("linux/arm64", "localhost/cdriver:v0.1.0", Path("/w/root"), EMULATOR, Path("/w/bin"))
    assert driver.chart_values() == ["--set", "image.repository=localhost/cdriver", "--set", "image.tag=v0.1.0"]
    content = find_image([driver.image()], "localhost/cdriver:v0.1.0")
    assert content is not None and content.path == ("/w/bin",)
    assert content.files == (("/templates", "/w/root/templates"),)
    assert driver.command == ["/w/bin/cdriver"]


@pytest.mark.parametrize("kwargs", [{"real_nodes": 1}, {"driver": "upstream"}])
def test_another_platforms_image_runs_on_simulated_nodes_with_cdriver_only(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(WorldError, match="simulated nodes only"):
        WorldSettings(base_dir=tmp_path, driver_platform="linux/arm64", **kwargs)
    assert WorldSettings(base_dir=tmp_path, driver_platform="linux/arm64").driver_platform == "linux/arm64"
