"""The checkpoint file on disk: locked, atomic, never discarded; claims void after a reboot.

A file that cannot be read, fails a checksum, or has an unknown version is never discarded or
rewritten: loading raises `CorruptCheckpoint` naming the file and the recovery step.
Writers serialise on ``pu.lock`` next to the file (a real ``flock``, the lock file upstream's
plugin takes around Prepare/Unprepare), so two plugins never interleave read-modify-write
cycles.

A node reboot voids every prepared claim (device nodes and transient CDI specs do not survive
it); claims recorded under another boot id are dropped when the checkpoint is loaded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from cdriver.atomic import atomic_write, remove_stale_temp_files
from cdriver.checkpoint import native
from cdriver.checkpoint.model import Checkpoint, CheckpointError, CorruptCheckpoint, InvalidContent

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"  # changes on every boot

log = logging.getLogger(__name__)

FILE_MODE = 0o600
#: The lock file both plugins take (upstream holds it around each Prepare/Unprepare).
LOCK_FILE_NAME = "pu.lock"
#: An unusable file is kept as ``<name>.corrupt-<UTC time>``.
ASIDE_SUFFIX = ".corrupt-"

# --- boot id ----------------------------------------------------------------------------


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id (changes on every reboot); "" (reboot detection off) if unreadable."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError as err:
        log.warning("cannot read boot id from %s (%s); reboots will not reset the checkpoint", path, err)
        return ""


def apply_boot_id(checkpoint: Checkpoint, boot_id: str) -> list[str]:
    """Bind ``checkpoint`` to ``boot_id``. Claims from another boot are dropped (their device
    nodes and CDI specs are gone); returns their UIDs. A checkpoint without a boot id (or an
    unknown current one) keeps its claims."""
    if not boot_id or checkpoint.boot_id == boot_id:
        return []
    dropped = []
    if checkpoint.boot_id:
        dropped = sorted(checkpoint.claims)
        for uid in dropped:
            del checkpoint.claims[uid]
    checkpoint.boot_id = boot_id
    return dropped


# --- lock holders (for the timeout message) ---------------------------------------------


def lock_holders(lock_path: str | os.PathLike[str]) -> list[int]:
    """PIDs holding a POSIX/flock lock on ``lock_path`` according to /proc/locks."""
    try:
        st = os.stat(lock_path)
        with open("/proc/locks") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":  # "->" marks a waiter, not a holder
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == (
                os.major(st.st_dev),
                os.minor(st.st_dev),
                st.st_ino,
            ):
                pids.append(int(fields[4]))
        except ValueError:
            continue
    return sorted(set(pids))


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmdline = ""
    return f"pid {pid} ({cmdline[:120]})" if cmdline else f"pid {pid}"


# --- store ------------------------------------------------------------------------------


class CheckpointStore:
    """The checkpoint file at ``path``; writers serialise on ``<path>.lock``."""

    def __init__(self, path: str | os.PathLike[str], boot_id: str | None = None, lock_timeout: float = 10):
        self.path = Path(path)
        self.lock_path = self.path.with_name(LOCK_FILE_NAME)
        self.lock_timeout = lock_timeout
        self._boot_id = boot_id
        self._lock = filelock.FileLock(self.lock_path, timeout=lock_timeout)
        self._holding = threading.local()

    @property
    def boot_id(self) -> str:
        if self._boot_id is None:
            self._boot_id = read_boot_id()
        return self._boot_id

    def _error(self, reason: str) -> CorruptCheckpoint:
        return CorruptCheckpoint(
            f"checkpoint {self.path} is unusable: {reason}. The file was left untouched. To recover, restart "
            f"the kubelet plugin: it moves the file aside (to {self.path.name}{ASIDE_SUFFIX}<time>, kept for "
            "inspection) and rebuilds the record of prepared claims from the API server and the CDI specs on "
            "this node, deleting none of them.",
            reason,
        )

    def keep_aside(self, now: float | None = None) -> Path:
        """Rename the (unusable) file to ``<name>.corrupt-<UTC time>`` next to it, never over an
        existing file; returns the new path. Nothing is written in its place."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        with self._lock_held():
            for attempt in range(1000):
                extra = f".{attempt}" if attempt else ""
                target = self.path.with_name(f"{self.path.name}{ASIDE_SUFFIX}{stamp}{extra}")
                try:
                    os.link(self.path, target)
                except FileExistsError:
                    continue
                except OSError as err:
                    raise CheckpointError(
                        f"cannot keep checkpoint {self.path} aside as {target}: {err.strerror or err}"
                    ) from None
                os.unlink(self.path)
                return target
        raise CheckpointError(f"cannot keep checkpoint {self.path} aside: 1000 kept copies exist; remove old ones")

    @contextlib.contextmanager
    def _lock_held(self) -> Iterator[None]:
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise CheckpointError(f"timed out waiting for the checkpoint lock {self.lock_path}") from None
        try:
            yield
        finally:
            self._lock.release()

    def _load(self) -> tuple[Checkpoint, bytes | None]:
        """The stored checkpoint (empty if there is no file) and the raw bytes read."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read(native.MAX_CHECKPOINT_BYTES + 1)
        except FileNotFoundError:
            return Checkpoint(boot_id=self.boot_id), None
        except OSError as err:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {err.strerror or err}") from None
        try:
            return native.decode(data), data
        except InvalidContent as err:
            raise self._error(str(err)) from None

    def read(self) -> Checkpoint:
        """A snapshot, without locking; claims from before a reboot are already dropped."""
        checkpoint, _ = self._load()
        dropped = apply_boot_id(checkpoint, self.boot_id)
        if dropped:
            log.debug("checkpoint %s is from an earlier boot; %d claims void", self.path, len(dropped))
        return checkpoint

    @contextlib.contextmanager
    def locked(self) -> Iterator[Checkpoint]:
        """Hold the lock, yield the checkpoint for changes, save it atomically on a clean exit
        (only if something changed). An exception in the block saves nothing."""
        if getattr(self._holding, "active", False):
            raise RuntimeError("CheckpointStore.locked() is not reentrant; use the checkpoint already yielded")
        try:
            self.path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            self._lock.acquire()
        except filelock.Timeout:
            holders = ", ".join(_describe(pid) for pid in lock_holders(self.lock_path)) or "another process"
            raise CheckpointError(
                f"timed out after {self.lock_timeout:g}s waiting for the checkpoint lock {self.lock_path}, "
                f"held by {holders}. Check that only one cdriver kubelet-plugin runs on this node and "
                "that it is not stuck; the lock is released when the holder exits."
            ) from None
        except OSError as err:
            raise CheckpointError(f"cannot lock checkpoint {self.lock_path}: {err.strerror or err}") from None
        self._holding.active = True
        try:
            remove_stale_temp_files(self.path)  # safe: every writer holds the lock
            checkpoint, raw = self._load()
            before = None if raw is None else native.payload(checkpoint)
            dropped = apply_boot_id(checkpoint, self.boot_id)
            if dropped:
                log.warning(
                    "node rebooted since checkpoint %s was written: dropping %d prepared claims (%s); their "
                    "device nodes and CDI specs did not survive the reboot",
                    self.path,
                    len(dropped),
                    ", ".join(dropped),
                )
            yield checkpoint
            if native.payload(checkpoint) != before:
                self._write(checkpoint)
        finally:
            self._holding.active = False
            self._lock.release()

    def _write(self, checkpoint: Checkpoint) -> None:
        data = native.encode(checkpoint)
        try:
            atomic_write(self.path, data, mode=FILE_MODE)
        except OSError as err:
            raise CheckpointError(
                f"cannot write checkpoint {self.path}: {err.strerror or err}; the previous content is intact"
            ) from None
