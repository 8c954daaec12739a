"""Daemon indices within a clique: which are held, which is free, and assigning the missing ones.

An IMEX daemon's index names it among its clique's peers (the DNS-name suffix, nvidia-imex's
node ID), so every entry of one clique needs its own index below MAX_NODES_PER_IMEX_DOMAIN.
The controller assigns them for every entry that lacks one (`assign_indices`, one write for all
daemons that joined meanwhile); a daemon takes the lowest free index itself only when no
assignment arrives (`next_free_index`). Pure functions over plain entry lists.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from cdriver.errors import CdriverError


class IndexExhausted(CdriverError):
    """Every index below MAX_NODES_PER_IMEX_DOMAIN is taken in this clique."""


def entry_index(entry: dict) -> int | None:
    """The entry's index, or None when absent or not a non-negative integer."""
    value = entry.get("index")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def used_indices(entries: list[dict], clique_id: str, exclude_node: str = "", key: str = "nodeName") -> set[int]:
    """Indices held by entries of `clique_id` (other than `exclude_node`)."""
    used: set[int] = set()
    for entry in entries:
        if entry.get("cliqueID") != clique_id or entry.get(key) == exclude_node:
            continue
        index = entry_index(entry)
        if index is not None:
            used.add(index)
    return used


def next_free_index(used: set[int], max_nodes: int) -> int:
    """Lowest non-negative index not in `used`; holes left by departed nodes are reused."""
    index = 0
    while index in used:
        index += 1
    if index >= max_nodes:
        raise IndexExhausted(
            f"no free index in the clique: all {max_nodes} indices (MAX_NODES_PER_IMEX_DOMAIN) are "
            "taken; remove a node from the ComputeDomain or raise the controller's "
            "maxNodesPerIMEXDomain setting"
        )
    return index


@dataclass(frozen=True)
class Assignment:
    """What `assign_indices` decided: the entries to write, and what it could not do."""

    entries: list[dict]
    #: node name -> the index it was given (new, or replacing an invalid or duplicate one)
    assigned: dict[str, int]
    #: nodes left without an index because every index below the maximum is taken
    exhausted: list[str]


def assign_indices(entries: list[dict], max_nodes: int, key: str = "nodeName") -> Assignment:
    """Give each entry without a valid index of its clique the lowest free one.

    A valid index is below `max_nodes` and held by no earlier entry of the same clique (the
    first holder in list order keeps it; a later duplicate gets a new one). Entries that hold a
    valid index keep it, so a running daemon's name never moves.
    """
    out = copy.deepcopy(entries)
    held: dict[str, set[int]] = {}
    needs: list[dict] = []
    for entry in out:
        clique_held = held.setdefault(str(entry.get("cliqueID") or ""), set())
        index = entry_index(entry)
        if index is None or index >= max_nodes or index in clique_held:
            needs.append(entry)
            continue
        clique_held.add(index)
    assigned: dict[str, int] = {}
    exhausted: list[str] = []
    for entry in needs:
        clique_held = held[str(entry.get("cliqueID") or "")]
        try:
            index = next_free_index(clique_held, max_nodes)
        except IndexExhausted:
            exhausted.append(str(entry.get(key)))
            continue
        entry["index"] = index
        clique_held.add(index)
        assigned[str(entry.get(key))] = index
    return Assignment(out, assigned, exhausted)
