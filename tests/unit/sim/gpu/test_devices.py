"""Simulated channel devices: proc/devices rendering and real character device nodes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdriver.nvml.discover import parse_device_major
from cdriver.sim.gpu import devices

SOURCE = """Character devices:
  1 mem
 10 misc
236 hidraw
240 nvidia-caps-imex-channels

Block devices:
  7 loop
241 blkext
"""


def test_choose_majors_skips_every_used_major_in_both_sections() -> None:
    assert devices.choose_majors(SOURCE, 2) == [242, 243]
    assert devices.choose_majors("Character devices:\n\nBlock devices:\n", 2) == [240, 241]


def test_choose_majors_on_this_machine_avoids_its_devices() -> None:
    text = devices.host_proc_devices()
    used = devices.parse_proc_devices(text).used_majors()
    channel, caps = devices.choose_majors(text, 2)
    assert channel not in used and caps not in used and channel != caps and channel >= 240


def test_render_replaces_old_entries_and_is_idempotent() -> None:
    out = devices.render_proc_devices(SOURCE, 250, 251)
    assert parse_device_major(out, "nvidia-caps-imex-channels") == 250
    assert parse_device_major(out, "nvidia-caps") == 251
    assert out.count("nvidia-caps-imex-channels") == 1
    assert "250 nvidia-caps-imex-channels\n251 nvidia-caps\n\nBlock devices:" in out
    assert "241 blkext" in out and "236 hidraw" in out
    assert devices.render_proc_devices(out, 250, 251) == out


def test_render_with_extra_entries() -> None:
    out = devices.render_proc_devices(SOURCE, 250, 251, extra={195: "nvidia-frontend"})
    assert parse_device_major(out, "nvidia-frontend") == 195
    assert devices.render_proc_devices(out, 250, 251, extra={195: "nvidia-frontend"}) == out


@pytest.mark.parametrize(
    ("channel", "caps", "message"),
    [
        (236, 250, r"major 236 for nvidia-caps-imex-channels is already used by 'hidraw'"),
        (250, 241, r"major 241 for nvidia-caps is already used by 'blkext' \(block devices\)"),
        (250, 250, r"choose different majors"),
        (0, 250, r"out of range 1\.\.4095"),
        (250, 4096, r"out of range"),
    ],
)
def test_render_rejects_bad_majors(channel: int, caps: int, message: str) -> None:
    with pytest.raises(devices.DeviceError, match=message):
        devices.render_proc_devices(SOURCE, channel, caps)


def test_render_needs_both_sections() -> None:
    with pytest.raises(devices.DeviceError, match=r"expected a 'Character devices:' section"):
        devices.render_proc_devices("1 mem\n", 250, 251, source="x")


def test_capability_text() -> None:
    assert devices.render_capability() == "DeviceFileMinor: 512\nDeviceFileMode: 438\nDeviceFileModify: 0\n"


def _free_major() -> int:
    return devices.choose_majors(devices.host_proc_devices(), 1)[0]


def test_channel_nodes_are_real_char_devices(tmp_path: Path) -> None:
    major = _free_major()
    paths = devices.create_channel_nodes(tmp_path / "dev", major, 5)
    assert [p.name for p in paths] == [f"channel{i}" for i in range(5)]
    for index, path in enumerate(paths):
        st = path.lstat()
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, index)
        assert stat.S_IMODE(st.st_mode) == 0o666
    assert paths[0].parent == tmp_path / "dev" / "nvidia-caps-imex-channels"


def test_channel_nodes_are_repaired_and_trimmed(tmp_path: Path) -> None:
    major = _free_major()
    dev = tmp_path / "dev"
    devices.create_channel_nodes(dev, major, 4)
    chan_dir = dev / "nvidia-caps-imex-channels"
    (chan_dir / "channel1").unlink()
    (chan_dir / "channel1").write_text("not a device")
    os.chmod(chan_dir / "channel2", 0o600)
    devices.create_channel_nodes(dev, major, 3)
    assert sorted(p.name for p in chan_dir.iterdir()) == ["channel0", "channel1", "channel2"]
    st1 = (chan_dir / "channel1").lstat()
    assert stat.S_ISCHR(st1.st_mode) and os.minor(st1.st_rdev) == 1
    assert stat.S_IMODE((chan_dir / "channel2").lstat().st_mode) == 0o666


def test_caps_node(tmp_path: Path) -> None:
    major = _free_major()
    path = devices.create_caps_node(tmp_path / "dev", major)
    st = path.lstat()
    assert path == tmp_path / "dev" / "nvidia-caps" / "nvidia-cap512"
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, 512)


def test_zero_channels_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(devices.DeviceError, match="at least 1"):
        devices.create_channel_nodes(tmp_path, 250, 0)
