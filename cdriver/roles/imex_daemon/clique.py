"""Clique membership: this node's entry in ComputeDomainClique `<cdUID>.<cliqueID>`.

Pure part: entry upsert/remove/status over plain entry lists (shared with the legacy
ComputeDomain.status.nodes path, whose key field is `name`), and the server-side-apply body of
this daemon's own entry. Effects: `CliqueStore` (read-your-writes cache over the API) with
`apply_entry`, the conflict-free write of a daemon's own entry (the controller then assigns its
index), and `update_with_retry`, the optimistic-concurrency loop for whole-list changes (leaving,
the legacy path, a daemon taking an index itself): every write carries the resourceVersion it was
computed from; a 409 re-reads the object and recomputes, so two writers never pick one index.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES
from cdriver.errors import CdriverError
from cdriver.imex.indices import IndexExhausted as IndexExhausted
from cdriver.imex.indices import entry_index, next_free_index, used_indices
from cdriver.kube.objects import owner_references_of

log = logging.getLogger(__name__)

KEY_CLIQUE = "nodeName"  # list-map key of ComputeDomainClique.daemons
KEY_CD_STATUS = "name"  # list-map key of ComputeDomain.status.nodes


class RetriesExhausted(CdriverError):
    """The optimistic update kept conflicting; the caller retries later."""


@dataclass(frozen=True)
class Member:
    """This daemon as it appears in the membership list."""

    node_name: str
    ip_address: str
    clique_id: str


# --- pure: entries -------------------------------------------------------------------


def find_entry(entries: list[dict], node_name: str, key: str = KEY_CLIQUE) -> dict | None:
    """The entry for `node_name`, or None."""
    for entry in entries:
        if entry.get(key) == node_name:
            return entry
    return None


def upsert_entry(entries: list[dict], member: Member, max_nodes: int,
                 key: str = KEY_CLIQUE) -> tuple[list[dict], bool]:
    """Return (entries with this node's entry present and current, changed).

    An existing entry of the same node keeps its index and status (a restarted daemon keeps
    its DNS name); only its IP and clique are refreshed. A new entry takes the lowest free
    index of its clique and starts NotReady. Raises IndexExhausted when none is free.
    """
    out = copy.deepcopy(entries)
    mine = find_entry(out, member.node_name, key)
    if mine is None:
        index = next_free_index(used_indices(out, member.clique_id, member.node_name, key), max_nodes)
        out.append({
            key: member.node_name,
            "ipAddress": member.ip_address,
            "cliqueID": member.clique_id,
            "index": index,
            "status": constants.STATUS_NOT_READY,
        })
        return out, True
    changed = False
    if mine.get("cliqueID") != member.clique_id:
        mine["cliqueID"] = member.clique_id
        changed = True
    current_index = entry_index(mine)
    others = used_indices(out, member.clique_id, member.node_name, key)
    if current_index is None or current_index >= max_nodes or current_index in others:
        mine["index"] = next_free_index(others, max_nodes)
        changed = True
    if mine.get("ipAddress") != member.ip_address:
        mine["ipAddress"] = member.ip_address
        changed = True
    return out, changed


def entry_outdated(entries: list[dict], member: Member, key: str = KEY_CLIQUE) -> bool:
    """True when this node has no entry yet, or its entry names another IP or clique."""
    mine = find_entry(entries, member.node_name, key)
    return mine is None or mine.get("ipAddress") != member.ip_address or mine.get("cliqueID") != member.clique_id


def remove_entry(entries: list[dict], node_name: str, key: str = KEY_CLIQUE) -> tuple[list[dict], bool]:
    """Return (entries without this node's entry, changed). Matches by node name only."""
    out = [copy.deepcopy(e) for e in entries if e.get(key) != node_name]
    return out, len(out) != len(entries)


def set_entry_status(entries: list[dict], node_name: str, status: str,
                     key: str = KEY_CLIQUE) -> tuple[list[dict], bool]:
    """Return (entries with this node's status set, changed); unchanged if the node is absent."""
    out = copy.deepcopy(entries)
    mine = find_entry(out, node_name, key)
    if mine is None or mine.get("status", constants.STATUS_NOT_READY) == status:
        return out, False
    mine["status"] = status
    return out, True


def entry_status(entry: dict | None) -> str | None:
    """Status of an entry as readers see it (absent status means NotReady), None if no entry."""
    if entry is None:
        return None
    return entry.get("status") or constants.STATUS_NOT_READY


# --- pure: the clique object ---------------------------------------------------------


def pod_owner_reference(pod_name: str, pod_uid: str) -> dict:
    """Owner reference to a daemon pod (no controller flag: every member pod is an owner)."""
    return {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}


def ensure_owner_reference(obj: dict, owner: dict) -> bool:
    """Add `owner` to obj.metadata.ownerReferences unless its UID is there; True if added."""
    refs = obj.setdefault("metadata", {}).setdefault("ownerReferences", [])
    if any(ref.get("uid") == owner["uid"] for ref in refs):
        return False
    refs.append(dict(owner))
    return True


def new_clique(name: str, namespace: str, cd_uid: str, clique_id: str, owner: dict) -> dict:
    """A ComputeDomainClique with no members yet, owned by this daemon's pod."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND_COMPUTE_DOMAIN_CLIQUE,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {constants.LABEL_COMPUTE_DOMAIN: cd_uid, constants.LABEL_CLIQUE_ID: clique_id},
            "ownerReferences": [dict(owner)],
        },
    }


#: Field managers are at most 128 characters; node names up to 253.
_MAX_FIELD_MANAGER = 128
FIELD_MANAGER_PREFIX = "cdriver-imex-daemon-"


def field_manager(node_name: str) -> str:
    """This node's server-side-apply field manager. One per node: an apply removes what its
    manager applied before and left out now, so daemons sharing one manager would remove
    each other's entries."""
    name = FIELD_MANAGER_PREFIX + node_name
    if len(name) <= _MAX_FIELD_MANAGER:
        return name
    import hashlib

    digest = hashlib.sha256(node_name.encode()).hexdigest()[:16]
    return name[: _MAX_FIELD_MANAGER - 17] + "-" + digest


def own_entry_applied(name: str, namespace: str, cd_uid: str, owner: dict, member: Member, status: str) -> dict:
    """The server-side-apply body of this daemon's part of the clique: the object's labels, its
    pod as an owner, and its own entry (never an index: the controller assigns indices)."""
    body = new_clique(name, namespace, cd_uid, member.clique_id, owner)
    body["daemons"] = [{
        KEY_CLIQUE: member.node_name,
        "ipAddress": member.ip_address,
        "cliqueID": member.clique_id,
        "status": status,
    }]
    return body


def resource_version(obj: dict | None) -> int:
    """Integer resourceVersion of an object (0 when absent or not numeric)."""
    if not obj:
        return 0
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", "0"))
    except ValueError:
        return 0


def backoff_delay(attempt: int, base: float = 0.005, cap: float = 6.0,
                  rng: Callable[[], float] = random.random) -> float:
    """Delay before retry `attempt` (1-based): base*2^(n-1) capped, jittered by +-25 %."""
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    return delay * (0.75 + 0.5 * rng())


# --- effects -------------------------------------------------------------------------


class MembershipStore(Protocol):
    """Where membership entries live (a clique object, or a ComputeDomain's status)."""

    key: str
    description: str

    def observe(self, obj: dict | None) -> None: ...
    def forget(self) -> None: ...
    def current(self) -> dict | None: ...
    def needs_write(self, obj: dict) -> bool: ...
    def refresh(self) -> dict | None: ...
    def ensure(self) -> dict: ...
    def write(self, obj: dict) -> dict: ...
    def entries(self, obj: dict | None) -> list[dict]: ...
    def with_entries(self, obj: dict, entries: list[dict]) -> dict: ...


class LatestObject:
    """The newest copy of one API object this daemon writes: from the watch or its own writes.

    Subclasses set `raw`, `res`, `namespace`, `name` and `description`, and may narrow
    `accepts` (e.g. to one uid).
    """

    raw: Any
    res: Any
    namespace: str
    name: str
    description: str
    _latest: dict | None = None

    def accepts(self, obj: dict) -> bool:
        """Whether `obj` is the object this store tracks."""
        return obj.get("metadata", {}).get("name") == self.name

    def observe(self, obj: dict | None) -> None:
        """Take an object seen on the watch or returned by a write, if newer than ours."""
        if obj is None or not self.accepts(obj):
            return
        if self._latest is None or resource_version(obj) >= resource_version(self._latest):
            self._latest = copy.deepcopy(obj)

    def forget(self) -> None:
        """The object was deleted (watch DELETED)."""
        self._latest = None

    def current(self) -> dict | None:
        return copy.deepcopy(self._latest) if self._latest is not None else None

    def refresh(self) -> dict | None:
        """Read the object from the API server (after a conflict); None if it is gone."""
        obj = self.raw.get_or_none(self.res, self.name, namespace=self.namespace)
        self._latest = obj if obj is not None and self.accepts(obj) else None
        return copy.deepcopy(self._latest)


class CliqueStore(LatestObject):
    """The ComputeDomainClique of this daemon: create, read (own writes win), update."""

    key = KEY_CLIQUE

    def __init__(self, raw: Any, namespace: str, name: str, cd_uid: str, clique_id: str,
                 owner: dict) -> None:

        self.raw = raw
        self.res = COMPUTE_DOMAIN_CLIQUES
        self.namespace = namespace
        self.name = name
        self.cd_uid = cd_uid
        self.clique_id = clique_id
        self.owner = owner
        self.description = f"ComputeDomainClique {namespace}/{name}"
        self._latest: dict | None = None

    def ensure(self) -> dict:
        """The clique, created (with labels and our owner reference) if it does not exist."""
        from cdriver.kube.errors import ApiError

        obj = self.current() or self.refresh()
        if obj is not None:
            return obj
        body = new_clique(self.name, self.namespace, self.cd_uid, self.clique_id, self.owner)
        try:
            created = self.raw.create(self.res, body, namespace=self.namespace)
            log.info("Created %s", self.description)
        except ApiError as exc:
            if not exc.already_exists:
                raise
            created = self.raw.get(self.res, self.name, namespace=self.namespace)
        self.observe(created)
        return copy.deepcopy(created)

    def apply_entry(self, member: Member, status: str) -> dict:
        """Write this daemon's own entry (and its pod as an owner) by server-side apply: no
        resourceVersion, so daemons joining at once never conflict; creates the clique if missing."""
        body = own_entry_applied(self.name, self.namespace, self.cd_uid, self.owner, member, status)
        out = self.raw.patch(self.res, self.name, body, namespace=self.namespace, patch_type="apply",
                             field_manager=field_manager(member.node_name), force=True)
        self.observe(out)
        return out

    def needs_write(self, obj: dict) -> bool:
        """True when this pod is not yet an owner (a new pod of the same node)."""
        refs = owner_references_of(obj)
        return not any(ref.get("uid") == self.owner["uid"] for ref in refs)

    def write(self, obj: dict) -> dict:
        ensure_owner_reference(obj, self.owner)
        out = self.raw.update(self.res, obj, namespace=self.namespace)
        self.observe(out)
        return out

    def entries(self, obj: dict | None) -> list[dict]:
        if not obj:
            return []
        return [e for e in (obj.get("daemons") or []) if isinstance(e, dict)]

    def with_entries(self, obj: dict, entries: list[dict]) -> dict:
        out = copy.deepcopy(obj)
        if entries:
            out["daemons"] = entries
        else:
            out.pop("daemons", None)
        return out



Mutation = Callable[[list[dict]], tuple[list[dict], bool]]
#: What one write of the membership object came to (`update_with_retry`'s ``on_write``).
WRITE_OK = "ok"
WRITE_CONFLICT = "conflict"
WRITE_ERROR = "error"


def update_with_retry(store: MembershipStore, mutate: Mutation, *, attempts: int = 12,
                      sleep: Callable[[float], Any], what: str = "update",
                      create_missing: bool = True,
                      on_write: Callable[[str], None] = lambda _result: None) -> dict | None:
    """Apply `mutate` to the store's entries and write, retrying on conflicts.

    Each attempt recomputes from the newest object (own writes, watch, or a fresh GET after a
    conflict), so a decision is never written over a version it was not computed from.
    Returns the object as stored; raises RetriesExhausted after `attempts` conflicts. With
    `create_missing` False (leaving), an object that is gone needs no write: returns None.
    `on_write(result)` hears of every write: `WRITE_OK`, `WRITE_CONFLICT` (409) or `WRITE_ERROR`.
    """
    from cdriver.kube.errors import ApiError

    obj = store.current()
    if obj is None:
        obj = store.ensure() if create_missing else store.refresh()
        if obj is None:
            return None
    for attempt in range(1, attempts + 1):
        entries, changed = mutate(store.entries(obj))
        if not changed and not store.needs_write(obj):
            return obj
        try:
            written = store.write(store.with_entries(obj, entries))
        except ApiError as exc:
            on_write(WRITE_CONFLICT if exc.conflict else WRITE_ERROR)
            if not (exc.conflict or exc.not_found):
                raise
            delay = backoff_delay(attempt)
            log.info("%s of %s: %s (attempt %d), retrying in %.3fs", what, store.description,
                     "conflict" if exc.conflict else "object gone", attempt, delay)
            sleep(delay)
            obj = store.refresh()
            if obj is None:
                if not create_missing:
                    return None
                obj = store.ensure()
            continue
        on_write(WRITE_OK)
        return written
    raise RetriesExhausted(f"{what} of {store.description} still conflicting after {attempts} attempts")
