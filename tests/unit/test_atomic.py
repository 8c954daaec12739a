"""Atomic writes: readers see old or new content, never a part; crashes leave the old file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdriver import atomic

# A writer that is SIGKILLed after its temp file is fsynced but before the rename.
KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from cdriver import atomic
    def hang(src, dst):
        print("about-to-rename", flush=True)
        time.sleep(60)
    os.replace = hang
    atomic.atomic_write(sys.argv[1], b"NEW CONTENT")
    """
)


def visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def test_write_creates_and_replaces_with_mode(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    atomic.atomic_write(target, "one", mode=0o640)
    assert target.read_text() == "one"
    assert target.stat().st_mode & 0o777 == 0o640
    atomic.atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert target.stat().st_mode & 0o777 == 0o644
    assert os.listdir(tmp_path) == ["data.json"]


def test_failed_rename_keeps_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "data.json"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        atomic.atomic_write(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["data.json"]


def test_missing_directory_raises_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic.atomic_write(tmp_path / "absent" / "data.json", "x")
    assert os.listdir(tmp_path) == []


def test_writer_killed_before_rename_leaves_old_file(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    target.write_text("OLD CONTENT")
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "about-to-rename"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert target.read_text() == "OLD CONTENT"
    # The half-done write is there, but hidden from anything scanning for *.json.
    leftovers = atomic.stale_temp_files(target)
    assert len(leftovers) == 1 and leftovers[0].read_bytes() == b"NEW CONTENT"
    assert visible(tmp_path) == ["data.json"]
    assert list(tmp_path.glob("*.json")) == [target]
    assert atomic.remove_stale_temp_files(target) == leftovers
    assert os.listdir(tmp_path) == ["data.json"]


def test_stale_temp_files_only_matches_its_own_target(tmp_path: Path) -> None:
    (tmp_path / ".a.json.x1.tmp").write_text("")
    (tmp_path / ".b.json.x2.tmp").write_text("")
    assert [p.name for p in atomic.stale_temp_files(tmp_path / "a.json")] == [".a.json.x1.tmp"]
    assert atomic.stale_temp_files(tmp_path / "missing-dir" / "a.json") == []


def test_remove_file_is_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    assert atomic.remove_file(target) is True
    assert atomic.remove_file(target) is False
    assert atomic.remove_file(tmp_path / "no-dir" / "f") is False


def test_atomic_path_replaces_the_target_with_what_the_block_wrote(tmp_path: Path) -> None:
    target = tmp_path / "libfoo.so"
    target.write_text("old")
    with atomic.atomic_path(target, mode=0o755) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".libfoo.so.") and tmp.name.endswith(".tmp")
        assert target.read_text() == "old"
        tmp.unlink()  # a writer that creates its output anew (cp, a linker's -o)
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o755
    assert os.listdir(tmp_path) == ["libfoo.so"]


def test_atomic_path_failing_block_keeps_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "archive.tar"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="build failed"), atomic.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("build failed")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["archive.tar"]
