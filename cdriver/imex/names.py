"""The peer host names of DNS-name mode: one set per ComputeDomain, stable for its life.

A domain's nodes config lists `compute-domain-daemon-<hash>-0000` .. `-<max-1>`, `<hash>`
derived from the ComputeDomain's UID. nvidia-imex takes two daemons whose nodes configs list
the same names for members of one IMEX domain, so names shared by every domain (the fixed
`compute-domain-daemon-NNNN` of upstream's commit 95932046) let a daemon of an old domain,
dialing a pod IP that has since been given to a new domain's daemon, join and disturb that
domain (upstream issue #1447). Pure functions only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DNS_NAME_PREFIX = "compute-domain-daemon-"

#: Where a name of a slot without a daemon points. A name missing from the hosts file would be
#: looked up in the cluster DNS (through every search domain) on each connection attempt; a
#: loopback address nothing listens on answers locally and refuses at once.
UNUSED_SLOT_IP = "127.0.0.2"

#: Kubernetes' alphabet for hash suffixes (no vowels, no 0/1/3), as in `pod-template-hash`.
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def _fnv1a_32(data: bytes) -> int:
    value = _FNV32_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


def domain_hash(cd_uid: str) -> str:
    """The per-domain part of the names: the 32-bit FNV-1a hash of the UID, its decimal digits
    written in Kubernetes' safe alphabet (up to 10 characters, e.g. ``8585d4965d``)."""
    if not isinstance(cd_uid, str) or not cd_uid:
        raise ValueError("a ComputeDomain UID is needed to name its daemons")
    return "".join(_SAFE_ALPHABET[ord(digit) % len(_SAFE_ALPHABET)]
                   for digit in str(_fnv1a_32(cd_uid.encode("utf-8"))))


def dns_name(cd_uid: str, index: int) -> str:
    """Host name of slot `index` of the domain `cd_uid`: compute-domain-daemon-<hash>-NNNN."""
    return f"{DNS_NAME_PREFIX}{domain_hash(cd_uid)}-{index:04d}"


def dns_names(cd_uid: str, max_nodes: int) -> list[str]:
    """Names of slots 0 .. max_nodes-1 of the domain, in index order."""
    prefix = f"{DNS_NAME_PREFIX}{domain_hash(cd_uid)}-"
    return [f"{prefix}{index:04d}" for index in range(max_nodes)]


def with_unused_slots(names: Sequence[str], live: Mapping[str, str]) -> dict[str, str]:
    """Every name -> its daemon's IP from `live`, or UNUSED_SLOT_IP for a slot without one."""
    return {name: live.get(name, UNUSED_SLOT_IP) for name in names}
