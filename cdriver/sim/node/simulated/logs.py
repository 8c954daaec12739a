"""Container log files in the CRI format kubelet reads, and the copier that writes them.

Each line of a log file is ``<RFC 3339 nano timestamp> <stdout|stderr> <F|P> <content>``:
``F`` ends a line, ``P`` is a fragment continued by the next entry of the same stream (written
when output arrives without a newline, so nothing waits in a buffer). `read_entries` turns a
file back into (timestamp, stream, text) entries for `kubectl logs` style readers.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STDOUT = "stdout"
STDERR = "stderr"
TAG_FULL = "F"
TAG_PARTIAL = "P"
#: Longest content of one log entry; longer lines are split into partial entries.
MAX_ENTRY_BYTES = 16 * 1024


def timestamp(now: dt.datetime | None = None) -> str:
    """RFC 3339 with nanoseconds (microsecond precision padded), UTC, as CRI writes it."""
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def format_entry(ts: str, stream: str, tag: str, content: bytes) -> bytes:
    """One CRI log line (content without its newline)."""
    return f"{ts} {stream} {tag} ".encode() + content + b"\n"


@dataclass(frozen=True)
class Entry:
    """A decoded log line: `content` ends with a newline for full lines."""

    timestamp: str
    stream: str
    content: bytes


def parse_line(line: bytes) -> tuple[str, str, str, bytes] | None:
    """(timestamp, stream, tag, content) of one CRI line, or None if it is not one."""
    line = line.rstrip(b"\n")
    parts = line.split(b" ", 3)
    if len(parts) < 3 or parts[1] not in (b"stdout", b"stderr") or parts[2] not in (b"F", b"P"):
        return None
    content = parts[3] if len(parts) == 4 else b""
    return parts[0].decode(), parts[1].decode(), parts[2].decode(), content


def split_output(pending: bytes, chunk: bytes) -> tuple[list[tuple[str, bytes]], bytes]:
    """Cut `pending + chunk` into (tag, content) entries; returns (entries, rest).

    Complete lines become full entries; an over-long line is emitted in partial pieces; a
    trailing fragment is returned as `rest` (the copier emits it as partial when the stream
    goes quiet or ends).
    """
    data = pending + chunk
    out: list[tuple[str, bytes]] = []
    while True:
        nl = data.find(b"\n")
        if nl < 0:
            break
        line, data = data[:nl], data[nl + 1:]
        while len(line) > MAX_ENTRY_BYTES:
            out.append((TAG_PARTIAL, line[:MAX_ENTRY_BYTES]))
            line = line[MAX_ENTRY_BYTES:]
        out.append((TAG_FULL, line))
    while len(data) > MAX_ENTRY_BYTES:
        out.append((TAG_PARTIAL, data[:MAX_ENTRY_BYTES]))
        data = data[MAX_ENTRY_BYTES:]
    return out, data


def iter_entries(lines: Iterator[bytes]) -> Iterator[Entry]:
    """Join partial entries per stream; lines that are not CRI lines are passed through."""
    partial: dict[str, tuple[str, bytes]] = {}
    for raw in lines:
        parsed = parse_line(raw)
        if parsed is None:
            yield Entry("", STDOUT, raw if raw.endswith(b"\n") else raw + b"\n")
            continue
        ts, stream, tag, content = parsed
        first_ts, buffered = partial.pop(stream, (ts, b""))
        if tag == TAG_PARTIAL:
            partial[stream] = (first_ts, buffered + content)
            continue
        yield Entry(first_ts, stream, buffered + content + b"\n")
    for stream, (ts, buffered) in partial.items():
        if buffered:
            yield Entry(ts, stream, buffered)


def read_entries(path: Path) -> list[Entry]:
    """All entries of one log file ([] if it does not exist)."""
    try:
        with open(path, "rb") as f:
            return list(iter_entries(iter(f)))
    except FileNotFoundError:
        return []


def render(entries: list[Entry], tail_lines: int | None = None, timestamps: bool = False) -> bytes:
    """What `kubectl logs` prints for `entries` (optionally only the last lines, with times)."""
    if tail_lines is not None:
        entries = entries[-tail_lines:] if tail_lines > 0 else []
    if timestamps:
        return b"".join(f"{e.timestamp} ".encode() + e.content for e in entries)
    return b"".join(e.content for e in entries)


class LogWriter:
    """Appends entries to one log file; shared by a container's stdout and stderr copiers."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)

    def write(self, stream: str, entries: list[tuple[str, bytes]]) -> None:
        if not entries:
            return
        ts = timestamp()
        data = b"".join(format_entry(ts, stream, tag, content) for tag, content in entries)
        with self._lock:
            if self._fd >= 0:
                os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class PipeCopier:
    """Copies one pipe (a container's stdout or stderr) into a `LogWriter` in a thread."""

    def __init__(self, fd: int, stream: str, writer: LogWriter, name: str) -> None:
        self.fd = fd
        self.stream = stream
        self.writer = writer
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> PipeCopier:
        self.thread.start()
        return self

    def _run(self) -> None:
        pending = b""
        try:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except InterruptedError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                entries, pending = split_output(pending, chunk)
                if pending:  # a fragment without newline: write it now, continued later
                    entries.append((TAG_PARTIAL, pending))
                    pending = b""
                self.writer.write(self.stream, entries)
        finally:
            if pending:
                self.writer.write(self.stream, [(TAG_FULL, pending)])
            os.close(self.fd)

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
