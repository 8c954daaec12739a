"""Membership in ComputeDomain.status.nodes (gate ComputeDomainCliques off) and the peer list
of IP mode (gate IMEXDaemonsWithDNSNames off): the paths that predate cliques and DNS names.

IP mode writes the raw peer IPs of this clique into nodes.cfg and restarts nvidia-imex on
every change. It waits until the ComputeDomain lists spec.numNodes nodes (of all cliques),
as the ComputeDomain API documents for this mode.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAINS
from cdriver.errors import CdriverError
from cdriver.imex import config as imex_config
from cdriver.kube.objects import meta_of

from .clique import KEY_CD_STATUS, LatestObject, entry_index

log = logging.getLogger(__name__)


class DomainMissing(CdriverError):
    """The ComputeDomain this daemon serves is gone or was replaced by a same-named one."""


# --- pure ----------------------------------------------------------------------------


def peer_ips(entries: list[dict], clique_id: str) -> list[str]:
    """IPs of this clique's members, ordered by index (entries without index last)."""
    same = [e for e in entries if e.get("cliqueID") == clique_id and e.get("ipAddress")]
    same.sort(key=lambda e: (entry_index(e) is None, entry_index(e) or 0, e.get("ipAddress")))
    out: list[str] = []
    for entry in same:
        if entry["ipAddress"] not in out:
            out.append(entry["ipAddress"])
    return out


def ip_nodes_config(ips: list[str]) -> str:
    """nodes.cfg body for IP mode."""
    return imex_config.render_nodes_config(ips)


def num_nodes(cd: dict | None) -> int:
    """spec.numNodes of a ComputeDomain (0 when absent)."""
    try:
        return int(((cd or {}).get("spec") or {}).get("numNodes") or 0)
    except (TypeError, ValueError):
        return 0


def peers_complete(cd: dict | None, entries: list[dict]) -> tuple[bool, int, int]:
    """(all expected nodes joined, nodes seen, nodes expected) for IP mode."""
    want = num_nodes(cd)
    seen = len(entries)
    return seen >= want, seen, want


# --- effects -------------------------------------------------------------------------


class DomainStatusStore(LatestObject):
    """This node's entry in ComputeDomain.status.nodes, written through the status subresource."""

    key = KEY_CD_STATUS

    def __init__(self, raw: Any, namespace: str, name: str, uid: str) -> None:

        self.raw = raw
        self.res = COMPUTE_DOMAINS
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.description = f"ComputeDomain {namespace}/{name}"
        self._latest: dict | None = None

    def accepts(self, obj: dict) -> bool:
        """This ComputeDomain only: a same-named one with another uid is a different domain."""
        meta = meta_of(obj)
        if meta.get("name") != self.name:
            return False
        if meta.get("uid") != self.uid:
            log.warning("Ignoring %s with uid %s: this daemon serves uid %s", self.description,
                        meta.get("uid"), self.uid)
            return False
        return True

    def ensure(self) -> dict:
        obj = self.current() or self.refresh()
        if obj is None:
            raise DomainMissing(
                f"{self.description} with uid {self.uid} does not exist; the daemon pod outlived its "
                "ComputeDomain and is removed by the controller"
            )
        return obj

    def needs_write(self, obj: dict) -> bool:
        return False

    def write(self, obj: dict) -> dict:
        out = self.raw.update_status(self.res, obj, namespace=self.namespace)
        self.observe(out)
        return out

    def entries(self, obj: dict | None) -> list[dict]:
        if not obj:
            return []
        return [e for e in ((obj.get("status") or {}).get("nodes") or []) if isinstance(e, dict)]

    def with_entries(self, obj: dict, entries: list[dict]) -> dict:
        out = copy.deepcopy(obj)
        status = out.setdefault("status", {})
        status.setdefault("status", constants.STATUS_NOT_READY)
        if entries:
            status["nodes"] = entries
        else:
            status.pop("nodes", None)
        return out
