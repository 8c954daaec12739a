"""The `# Compute Domain Daemon mappings` block of an /etc/hosts file.

In DNS-name mode the nodes config lists the domain's names (`cdriver.imex.names`) and this
block maps each of them: a current clique member's to its IP, every other slot's to the unused
slot address. `render_hosts` is pure and idempotent: one block, no accumulating headers, every
other line kept as it was.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping

from cdriver.errors import CdriverError
from cdriver.imex.names import DNS_NAME_PREFIX

HOSTS_FILE = "/etc/hosts"
HOSTS_BLOCK_HEADER = "# Compute Domain Daemon mappings"
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


class HostsError(CdriverError):
    """A mapping that cannot go into a hosts file, or a hosts file that cannot be updated."""


def _is_managed_line(line: str) -> bool:
    """True for the block header and for lines naming a compute-domain-daemon-* host (either
    driver's names, so a switch leaves no stale line behind)."""
    stripped = line.strip()
    if stripped == HOSTS_BLOCK_HEADER:
        return True
    fields = stripped.split("#", 1)[0].split()
    return any(name.startswith(DNS_NAME_PREFIX) for name in fields[1:])


def validate_mapping(mapping: Mapping[str, str]) -> None:
    """Every name must be a host name and every value an IP address."""
    for name, ip in mapping.items():
        if not isinstance(name, str) or not _HOSTNAME_RE.match(name):
            raise HostsError(f"hosts mapping: {name!r} is not a valid host name (letters, digits, '.', '-')")
        try:
            ipaddress.ip_address(ip)
        except (TypeError, ValueError):
            raise HostsError(f"hosts mapping: {name} -> {ip!r}: not an IP address") from None


def render_hosts(existing_text: str, mapping: Mapping[str, str]) -> str:
    """`existing_text` with its daemon block replaced by `mapping` (name -> IP).

    Lines naming compute-domain-daemon-* hosts and old headers are dropped; all other lines
    are kept in order. The block (header + `<ip>\\t<name>` lines sorted by name) goes at the
    end after one blank line; an empty mapping leaves no block.
    """
    validate_mapping(mapping)
    kept = [line for line in existing_text.splitlines() if not _is_managed_line(line)]
    while kept and not kept[-1].strip():
        kept.pop()
    out = list(kept)
    if mapping:
        if out:
            out.append("")
        out.append(HOSTS_BLOCK_HEADER)
        out.extend(f"{mapping[name]}\t{name}" for name in sorted(mapping))
    return "\n".join(out) + "\n" if out else ""


def parse_hosts(text: str) -> dict[str, str]:
    """Host name (lower-cased) -> IP from hosts-file text; the first line naming a host wins."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            ipaddress.ip_address(fields[0])
        except ValueError:
            continue
        for name in fields[1:]:
            result.setdefault(name.lower(), fields[0])
    return result


def read_hosts_file(path: str | os.PathLike[str] = HOSTS_FILE) -> str:
    """Text of a hosts file ("" if it does not exist)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""
    except OSError as e:
        raise HostsError(f"cannot read hosts file {path}: {e.strerror or e}") from None


def rewrite_hosts_file(path: str | os.PathLike[str], mapping: Mapping[str, str]) -> bool:
    """Replace the daemon block of the hosts file at `path` in place; True if it changed.

    Written in place (truncate + write + fsync), never renamed over: in a pod /etc/hosts is a
    single-file bind mount, which a rename cannot replace. The mapping is validated before the
    file is touched. A missing file is created (0644).
    """
    validate_mapping(mapping)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise HostsError(f"cannot open hosts file {path} for writing: {e.strerror or e}") from None
    with os.fdopen(fd, "r+", encoding="utf-8", errors="surrogateescape", newline="") as f:
        try:
            current = f.read()
            new = render_hosts(current, mapping)
            if new == current:
                return False
            f.seek(0)
            f.write(new)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            raise HostsError(f"cannot update hosts file {path}: {e.strerror or e}") from None
    return True
