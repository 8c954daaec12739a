"""DNS-name mode: a static peer list of synthetic names, resolved through this container's hosts file.

nodes.cfg always lists the domain's names, compute-domain-daemon-<hash>-0000 .. <max-1>
(`cdriver.imex.names`: the hash comes from the ComputeDomain's UID, so no two domains share
names). Which pod IP each name stands for is decided by the block this module maintains in
the hosts file; a slot without a daemon points at the unused-slot address. A peer
change therefore needs only a SIGUSR1 to nvidia-imex; a change of this daemon's own index (its
node ID, read only at start) needs a restart (see `daemon_state`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from cdriver.imex import config as imex_config
from cdriver.imex import hosts as imex_hosts
from cdriver.imex import names as imex_names
from cdriver.imex.names import dns_name

from .clique import KEY_CLIQUE, entry_index, find_entry

log = logging.getLogger(__name__)


def static_nodes_config(cd_uid: str, max_nodes: int) -> str:
    """nodes.cfg body for DNS-name mode (one name per line)."""
    return imex_config.dns_nodes_config(cd_uid, max_nodes)


def dns_mapping(entries: list[dict], clique_id: str, cd_uid: str,
                max_nodes: int) -> tuple[dict[str, str], list[str]]:
    """Map name -> IP for the same-clique entries; also return a problem per unusable entry.

    An entry without a valid index (< max) or without an IP cannot be given a name; it is
    left out and reported instead of stopping the daemon.
    """
    mapping: dict[str, str] = {}
    problems: list[str] = []
    for entry in entries:
        if entry.get("cliqueID") != clique_id:
            continue
        node = entry.get("nodeName") or entry.get("name") or "?"
        index = entry_index(entry)
        ip = entry.get("ipAddress") or ""
        if index is None or index >= max_nodes:
            problems.append(
                f"entry of node {node} has index {entry.get('index')!r}, outside 0..{max_nodes - 1}")
            continue
        if not ip:
            problems.append(f"entry of node {node} has no ipAddress")
            continue
        name = dns_name(cd_uid, index)
        if name in mapping and mapping[name] != ip:
            problems.append(f"index {index} is claimed by two entries ({mapping[name]} and {ip} of {node})")
            continue
        mapping[name] = ip
    return mapping, problems


def own_index(entries: list[dict], node_name: str, mapping: dict[str, str], cd_uid: str,
              key: str = KEY_CLIQUE) -> int | None:
    """This daemon's index as `mapping` names it: its entry's index when that name maps to the
    entry's IP (None: its entry is missing or got no name)."""
    mine = find_entry(entries, node_name, key)
    index = entry_index(mine) if mine is not None else None
    if mine is None or index is None or mapping.get(dns_name(cd_uid, index)) != mine.get("ipAddress"):
        return None
    return index


def describe_mapping(mapping: dict[str, str]) -> str:
    """`name -> ip` pairs sorted by name, for the log."""
    if not mapping:
        return "empty"
    return ", ".join(f"{name} -> {mapping[name]}" for name in sorted(mapping))


def hosts_block(cd_uid: str, max_nodes: int, mapping: dict[str, str]) -> dict[str, str]:
    """What the hosts block lists: every name of the nodes config, the members' as `mapping`
    says, the others pointing at the unused-slot address (so no lookup leaves the pod)."""
    return imex_names.with_unused_slots(imex_names.dns_names(cd_uid, max_nodes), mapping)


def update_hosts_file(path: Path, block: dict[str, str]) -> bool:
    """Rewrite the daemon block of the hosts file to `block` in place; True if it changed.

    Lines outside the block are kept; repeated rewrites do not accumulate headers or blank
    lines. In place, because a container's /etc/hosts is a bind mount a rename cannot replace.
    """
    return imex_hosts.rewrite_hosts_file(path, block)
