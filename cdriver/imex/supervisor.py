"""Running one child process (nvidia-imex) for as long as the daemon lives.

The supervisor starts the child, restarts it after a crash with capped exponential backoff,
forwards reload requests as SIGUSR1 and stops it with SIGTERM, then SIGKILL after a grace
period. The child's combined stdout/stderr goes to a ring buffer (for error messages), an
optional log file and an optional stream (the container log).
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

import psutil

from cdriver.errors import CdriverError

log = logging.getLogger(__name__)

#: on_exit(returncode, expected): expected is True when the exit was asked for (stop/restart).
ExitCallback = Callable[[int, bool], None]


class SupervisorError(CdriverError):
    """The child cannot be started or signalled."""


def backoff_delay(failures: int, initial: float, maximum: float) -> float:
    """Delay before restart number `failures` in a row: initial * 2**(failures-1), capped."""
    if failures <= 0:
        return 0.0
    return min(maximum, initial * (2 ** min(failures - 1, 62)))


class ProcessSupervisor:
    """Keep `argv` running; see the module docstring.

    Parameters: `env` for the child (default: inherited); `log_path` gets every output line
    (appended); `echo` is a text stream that also gets every line; `initial_backoff` and
    `max_backoff` bound the restart delay; a run that lasted `stable_after` seconds (default:
    `max_backoff`) resets the backoff; `output_lines` sizes the ring buffer; `on_exit` is
    called from the supervisor thread after every exit.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        max_backoff: float = 30.0,
        *,
        initial_backoff: float = 1.0,
        stable_after: float | None = None,
        output_lines: int = 200,
        echo: IO[str] | None = None,
        on_exit: ExitCallback | None = None,
        name: str | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.log_path = os.fspath(log_path) if log_path is not None else None
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.stable_after = max_backoff if stable_after is None else stable_after
        self.echo = echo
        self.on_exit: ExitCallback | None = on_exit
        self.name = name or os.path.basename(self.argv[0])
        self.restart_count = 0
        #: children started, restarts after a crash, and starts that failed to spawn (metrics)
        self.starts = 0
        self.crash_restarts = 0
        self.spawn_failures = 0
        self._failures = 0  # crashes in a row, for the backoff
        self._lines: collections.deque[str] = collections.deque(maxlen=output_lines)
        self._lines_lock = threading.Lock()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._monitor: threading.Thread | None = None
        self._log_file: IO[str] | None = None

    # --- public API ----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of the running child, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while a child process is alive."""
        return self.pid is not None

    @property
    def active(self) -> bool:
        """True between start() and stop(), including a pending restart after a crash."""
        monitor = self._monitor
        return monitor is not None and monitor.is_alive() and not self._stopping

    def last_output_lines(self, n: int = 20) -> list[str]:
        """The last `n` lines the child printed (across restarts)."""
        with self._lines_lock:
            return list(self._lines)[-n:] if n > 0 else []

    def start(self) -> None:
        """Start the child; raises SupervisorError if it cannot be spawned or already runs."""
        with self._lock:
            if self.active:
                raise SupervisorError(f"{self.name} is already running (pid {self.pid})")
            self._stopping = False
            self._wake.clear()
            proc = self._spawn()
            self._monitor = threading.Thread(
                target=self._watch, args=(proc,), name=f"supervise-{self.name}", daemon=True
            )
            self._monitor.start()

    def ensure_started(self) -> bool:
        """Start the child unless it is already supervised; True if this call started it."""
        with self._lock:
            if self.active:
                return False
            self.start()
            return True

    def reload(self) -> None:
        """Ask the child to re-read its configuration (SIGUSR1)."""
        self.send_signal(signal.SIGUSR1)

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the running child; SupervisorError if none runs."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None or self._stopping:
                raise SupervisorError(f"cannot signal {self.name}: it is not running")
            proc.send_signal(sig)

    def stop(self, grace: float = 10) -> int | None:
        """SIGTERM the child, SIGKILL it (and its children) after `grace` s; its exit code.

        Idempotent; returns None if nothing was running.
        """
        with self._lock:
            self._stopping = True
            self._wake.set()
            proc = self._proc
            monitor = self._monitor
        if proc is None:
            self._close_log()
            return None
        if proc.poll() is None:
            descendants = _descendants(proc.pid)
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not exit within %gs of SIGTERM; sending SIGKILL",
                            self.name, proc.pid, grace)
                for child in descendants + _descendants(proc.pid):
                    _kill(child)
                proc.kill()
                proc.wait()
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join()
        self._close_log()
        return proc.returncode

    def restart(self, grace: float = 10) -> None:
        """Stop the child and start a new one (backoff state reset)."""
        had_child = self._proc is not None
        self.stop(grace)
        with self._lock:
            if had_child:
                self.restart_count += 1
            self._failures = 0
        log.info("restarting %s on request (restart #%d)", self.name, self.restart_count)
        self.start()

    # --- internals -----------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start one child process and its output reader (caller holds the lock)."""
        try:
            proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                close_fds=True,
            )
        except FileNotFoundError:
            self.spawn_failures += 1
            raise SupervisorError(
                f"cannot start {self.name}: {self.argv[0]} not found; check PATH and the driver root"
            ) from None
        except OSError as e:
            self.spawn_failures += 1
            raise SupervisorError(f"cannot start {self.name} ({self.argv[0]}): {e.strerror or e}") from None
        self._proc = proc
        self.starts += 1
        self._open_log()
        self._emit(f"--- {self.name} started, pid {proc.pid} ---", to_ring=False)
        log.info("started %s, pid %d: %s", self.name, proc.pid, " ".join(self.argv))
        self._reader = threading.Thread(
            target=self._read_output, args=(proc,), name=f"output-{self.name}", daemon=True
        )
        self._reader.start()
        return proc

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        started = time.monotonic()
        while True:
            rc = proc.wait()
            reader = self._reader
            if reader is not None:
                reader.join(timeout=2)
            ran = time.monotonic() - started
            with self._lock:
                expected = self._stopping
            self._report_exit(proc, rc, expected, ran)
            if expected:
                return
            with self._lock:
                self._failures = 1 if ran >= self.stable_after else self._failures + 1
            while True:
                delay = backoff_delay(self._failures, self.initial_backoff, self.max_backoff)
                tail = "\n".join(f"  | {line}" for line in self.last_output_lines(10)) or "  | <no output>"
                log.warning(
                    "%s exited unexpectedly with code %d after %.1fs; restart #%d in %.2fs; last output:\n%s",
                    self.name, rc, ran, self.restart_count + 1, delay, tail,
                )
                if self._wake.wait(delay):
                    return
                with self._lock:
                    if self._stopping:
                        return
                    try:
                        proc = self._spawn()
                    except SupervisorError as e:
                        self._failures += 1
                        log.error("%s", e)
                        continue
                    self.restart_count += 1
                    self.crash_restarts += 1
                    started = time.monotonic()
                log.info("restarted %s (restart #%d), pid %d", self.name, self.restart_count, proc.pid)
                break

    def _report_exit(self, proc: subprocess.Popen[bytes], rc: int, expected: bool, ran: float) -> None:
        how = f"signal {-rc}" if rc < 0 else f"code {rc}"
        self._emit(f"--- {self.name} pid {proc.pid} exited with {how} ---", to_ring=False)
        if expected or rc == 0:
            log.info("%s (pid %d) exited with %s after %.1fs", self.name, proc.pid, how, ran)
        callback = self.on_exit
        if callback is not None:
            try:
                callback(rc, expected)
            except Exception:
                log.exception("on_exit callback for %s failed", self.name)

    def _read_output(self, proc: subprocess.Popen[bytes]) -> None:
        stream = proc.stdout
        if stream is None:
            return
        with stream:
            for raw in iter(stream.readline, b""):
                self._emit(raw.decode("utf-8", errors="replace").rstrip("\r\n"))

    def _emit(self, line: str, to_ring: bool = True) -> None:
        if to_ring:
            with self._lines_lock:
                self._lines.append(line)
        log_file = self._log_file
        if log_file is not None:
            try:
                log_file.write(line + "\n")
                log_file.flush()
            except (OSError, ValueError):
                pass
        if self.echo is not None and to_ring:
            try:
                self.echo.write(line + "\n")
                self.echo.flush()
            except (OSError, ValueError):
                pass

    def _open_log(self) -> None:
        if self.log_path is None or self._log_file is not None:
            return
        try:
            self._log_file = open(self.log_path, "a", encoding="utf-8")
        except OSError as e:
            log.warning("cannot open log file %s for %s: %s; output kept in memory only",
                        self.log_path, self.name, e.strerror or e)

    def _close_log(self) -> None:
        with self._lock:
            log_file, self._log_file = self._log_file, None
        if log_file is not None:
            try:
                log_file.close()
            except OSError:
                pass


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
    except psutil.Error:
        pass
