"""`nvidia-imex-ctl` stand-in: asks the local stand-in daemon over its command service.

`-q` prints exactly `READY` (exit 0) when the daemon serves, otherwise a not-ready message
(exit 1). `-N` prints the domain status (`-j`: JSON with `nodes` keyed by index, each with
`status`/`version`/`connections`, and domain `status` UP / DEGRADED / DOWN). The daemon is
found through `-c <config>` (default), `-u <socket>` / `--u=<socket>` or `-i <ip> <port>`.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from cdriver.errors import CdriverError
from cdriver.imex.config import DEFAULT_IMEX_CONFIG, IMEX_CTL_BINARY, KEY_CMD_ENABLED, read_config, read_nodes_config
from cdriver.imex.ctl import IMEX_READY_OUTPUT
from cdriver.imex.hosts import read_hosts_file
from cdriver.sim.imex import protocol

PROG = IMEX_CTL_BINARY
DEFAULT_TIMEOUT_MS = 5000


class CtlError(CdriverError):
    """The command service cannot be found or reached, or answered nonsense."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description="IMEX control stand-in from the cdriver simulation kit.",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("-c", "--c", dest="config", help=f"config file (default {DEFAULT_IMEX_CONFIG})")
    target.add_argument("-u", "--u", dest="unix_socket", help="command service Unix socket")
    target.add_argument("-i", "--i", dest="inet", nargs=2, metavar=("IP", "PORT"),
                        help="command service address")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("-q", "--q", dest="query", action="store_true", help="is the local daemon ready")
    mode.add_argument("-N", "--N", dest="domain", action="store_true", help="domain status, once")
    mode.add_argument("-n", "--n", dest="monitor", action="store_true", help="domain status, every second")
    parser.add_argument("-j", "--j", dest="json", action="store_true", help="JSON output for -N / -n")
    parser.add_argument("-H", "--H", dest="hostnames", action="store_true", help="show host names")
    parser.add_argument("-t", "--t", dest="timeout_ms", type=int, default=DEFAULT_TIMEOUT_MS,
                        help="timeout in milliseconds")
    return parser


def resolve_target(args: argparse.Namespace) -> protocol.CommandTarget:
    """Where to reach the daemon's command service, from -u / -i / the config."""
    if args.unix_socket:
        return protocol.CommandTarget(unix_path=args.unix_socket)
    if args.inet:
        host, port_text = args.inet
        try:
            port = int(port_text)
        except ValueError:
            port = 0
        if not 1 <= port <= 65535:
            raise CtlError(f"-i {host} {port_text}: the port must be a number from 1 to 65535")
        return protocol.CommandTarget(host=host, port=port)
    config_path = args.config or DEFAULT_IMEX_CONFIG
    cfg = read_config(config_path)
    if not cfg.cmd_enabled:
        raise CtlError(f"{config_path}: {KEY_CMD_ENABLED}=0, the command service is off; set it to 1")
    self_ip = None
    if not cfg.cmd_bind_ip:
        members = protocol.resolve_members(
            read_nodes_config(cfg.node_config_file), read_hosts_file(protocol.hosts_file_path())
        )
        self_ip = protocol.choose_self_address(cfg, members, protocol.local_addresses())
    return protocol.CommandTarget(host=protocol.command_host(cfg, self_ip), port=cfg.cmd_port)


def request(target: protocol.CommandTarget, message: dict, timeout: float) -> dict:
    """Send one command and return the daemon's reply."""
    try:
        if target.unix_path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(target.unix_path)
        else:
            sock = socket.create_connection((target.host, target.port), timeout=timeout)
    except OSError as e:
        raise CtlError(
            f"cannot reach the IMEX daemon command service at {target.describe()}: "
            f"{e.strerror or e}; is nvidia-imex running with IMEX_CMD_ENABLED=1?"
        ) from None
    with sock:
        try:
            sock.sendall(protocol.encode(message))
            data = b""
            while not data.endswith(b"\n") and len(data) <= protocol.MAX_LINE:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as e:
            raise CtlError(f"IMEX daemon at {target.describe()} did not answer: {e.strerror or e}") from None
    if not data:
        raise CtlError(f"IMEX daemon at {target.describe()} closed the connection without an answer")
    reply = protocol.decode(data.strip())
    if not reply.get("ok"):
        raise CtlError(f"IMEX daemon at {target.describe()} refused the command: {reply.get('error')}")
    return reply


def _print_domain(target: protocol.CommandTarget, args: argparse.Namespace, timeout: float) -> None:
    reply = request(target, {"cmd": protocol.CMD_DOMAIN, "hostnames": args.hostnames}, timeout)
    report = reply.get("domain")
    if not isinstance(report, dict):
        raise CtlError(f"IMEX daemon at {target.describe()} sent no domain status")
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(protocol.render_domain_text(report))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ready/ok, 1 not ready or unreachable, 2 usage)."""
    args = build_parser().parse_args(argv)
    timeout = max(args.timeout_ms, 1) / 1000.0
    try:
        target = resolve_target(args)
        if args.query:
            status = request(target, {"cmd": protocol.CMD_QUERY}, timeout).get("status")
            if status == protocol.STATE_READY:
                sys.stdout.write(IMEX_READY_OUTPUT + "\n")
                return 0
            sys.stdout.write(f"IMEX daemon is not ready (state {status})\n")
            return 1
        if args.domain:
            _print_domain(target, args, timeout)
            return 0
        while True:  # -n: until interrupted
            _print_domain(target, args, timeout)
            time.sleep(1)
    except CdriverError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
