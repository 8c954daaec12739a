"""CRI-format container logs: splitting output, joining partial lines, rendering."""

from __future__ import annotations

import os
from pathlib import Path

from cdriver.sim.node.simulated import logs


def test_split_output_keeps_fragments_and_cuts_long_lines() -> None:
    entries, rest = logs.split_output(b"par", b"tial\nnext")
    assert entries == [("F", b"partial")] and rest == b"next"
    long = b"x" * (logs.MAX_ENTRY_BYTES + 10) + b"\n"
    entries, rest = logs.split_output(b"", long)
    assert [tag for tag, _ in entries] == ["P", "F"] and rest == b""
    assert b"".join(c for _, c in entries) == long[:-1]


def test_parse_and_join_partial_entries_per_stream() -> None:
    lines = [
        logs.format_entry("t1", "stdout", "P", b"hel"),
        logs.format_entry("t2", "stderr", "F", b"oops"),
        logs.format_entry("t3", "stdout", "F", b"lo"),
        logs.format_entry("t4", "stdout", "P", b"tail-without-newline"),
    ]
    entries = list(logs.iter_entries(iter(lines)))
    assert [(e.timestamp, e.stream, e.content) for e in entries] == [
        ("t2", "stderr", b"oops\n"), ("t1", "stdout", b"hello\n"), ("t4", "stdout", b"tail-without-newline")]
    assert logs.parse_line(b"not a cri line\n") is None


def test_render_tail_and_timestamps() -> None:
    entries = [logs.Entry(f"t{i}", "stdout", f"line{i}\n".encode()) for i in range(5)]
    assert logs.render(entries) == b"".join(e.content for e in entries)
    assert logs.render(entries, tail_lines=2) == b"line3\nline4\n"
    assert logs.render(entries, tail_lines=0) == b""
    assert logs.render(entries[:1], timestamps=True) == b"t0 line0\n"


def test_copier_writes_both_streams_to_one_file(tmp_path: Path) -> None:
    writer = logs.LogWriter(tmp_path / "c" / "0.log")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    copiers = [logs.PipeCopier(out_r, logs.STDOUT, writer, "o").start(),
               logs.PipeCopier(err_r, logs.STDERR, writer, "e").start()]
    os.write(out_w, b"one\ntwo")
    os.write(err_w, b"bad\n")
    os.close(out_w)
    os.close(err_w)
    for c in copiers:
        c.join(5)
    writer.close()
    entries = logs.read_entries(tmp_path / "c" / "0.log")
    got = sorted((e.stream, e.content) for e in entries)
    assert got == [("stderr", b"bad\n"), ("stdout", b"one\n"), ("stdout", b"two")]
    assert all(e.timestamp.endswith("Z") for e in entries)
    assert logs.read_entries(tmp_path / "missing.log") == []
