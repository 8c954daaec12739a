"""IMEX stand-ins (`cdriver.sim.imex.nvidia_imex`) as processes on loopback addresses: free port
pairs, rendered configs, the ctl wrapper a simulated driver root installs, and the processes
of one test with their logs."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

from cdriver.imex import config as imex_config
from cdriver.imex import ctl
from cdriver.imex.config import IMEX_CTL_BINARY
from cdriver.sim.imex.protocol import ENV_SIM_HOSTS_FILE
from tests.support.imex_timing import fast_imex_env
from tests.support.waiting import wait_for


def free_ports(ips: list[str]) -> tuple[int, int]:
    """(server port, command port) free on every address in `ips`."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000)
        try:
            for ip in ips:
                for port in (base, base + 5):
                    with socket.socket() as s:
                        s.bind((ip, port))
        except OSError:
            continue
        return base, base + 5
    raise RuntimeError("no free port pair found")


class StandInWorld:
    """Temp dir, ports (free on every address in `ips`), env and processes of one test."""

    def __init__(self, tmp_path: Path, ips: list[str]) -> None:
        self.dir = tmp_path
        self.ports = free_ports(ips)
        self.hosts_file = tmp_path / "hosts"
        self.hosts_file.write_text("127.0.0.1\tlocalhost\n")
        # short heartbeats and retries so the domain converges in well under a second
        self.env = {**os.environ, **fast_imex_env(), ENV_SIM_HOSTS_FILE: str(self.hosts_file)}
        self.procs: list[subprocess.Popen[bytes]] = []
        # the way a simulated driver root calls the stand-in: a wrapper that execs the CLI
        self.ctl = tmp_path / "bin" / IMEX_CTL_BINARY
        self.ctl.parent.mkdir()
        self.ctl.write_text(f'#!/bin/sh\nexec {sys.executable} -m cdriver sim imex ctl "$@"\n')
        self.ctl.chmod(0o755)

    def config(self, name: str, ip: str, nodes: list[str], unix_socket: str | None = None,
               hosts_file: Path | None = None) -> Path:
        nodes_cfg = self.dir / f"{name}-nodes.cfg"
        nodes_cfg.write_text(imex_config.render_nodes_config(nodes))
        text = imex_config.render_config(
            imex_config.load_template(), str(nodes_cfg), ip, unix_socket,
            server_port=self.ports[0], cmd_port=self.ports[1],
        )
        path = self.dir / f"{name}.cfg"
        path.write_text(text)
        return path

    def daemon_argv(self, cfg: Path) -> list[str]:
        return [sys.executable, "-m", "cdriver.sim.imex.nvidia_imex", "-c", str(cfg)]

    def start(self, cfg: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{cfg.stem}.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(self.daemon_argv(cfg), stdout=log, stderr=subprocess.STDOUT,
                                env=env or self.env)
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, cfg: Path) -> str:
        path = self.dir / f"{cfg.stem}.log"
        return path.read_text() if path.exists() else ""

    def probe(self, cfg: Path) -> ctl.ProbeResult:
        return ctl.probe_ready(str(self.ctl), config_path=str(cfg), timeout=10, env=self.env)

    def domain(self, cfg: Path) -> dict:
        return ctl.query_domain(str(self.ctl), config_path=str(cfg), timeout=10, env=self.env)

    def status(self, cfg: Path) -> str:
        return self.domain(cfg)["status"]

    def wait_ready(self, cfg: Path) -> ctl.ProbeResult:
        return wait_for(f"{cfg.name} daemon to answer -q", lambda: (r := self.probe(cfg)).ready and r, 15)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
