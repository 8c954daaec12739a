"""Per-domain peer names of DNS-name mode (upstream #1465, fixing #1447)."""

from __future__ import annotations

import re
import uuid

import pytest

from cdriver.imex import names

UID_A = "0b6f5d1e-8c1a-4f7e-9a51-3f2d7c9e4a10"
UID_B = "0b6f5d1e-8c1a-4f7e-9a51-3f2d7c9e4a11"  # one character away from UID_A

#: a label of at most 63 characters, lower-case letters, digits and '-' (RFC 1123)
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def test_names_carry_the_domain_hash_and_the_slot_index() -> None:
    h = names.domain_hash(UID_A)
    assert names.dns_name(UID_A, 0) == f"compute-domain-daemon-{h}-0000"
    assert names.dns_name(UID_A, 17) == f"compute-domain-daemon-{h}-0017"
    assert names.dns_names(UID_A, 3) == [names.dns_name(UID_A, i) for i in range(3)]


def test_the_hash_is_stable_for_a_uid_and_shaped_like_a_kubernetes_hash_suffix() -> None:
    # the same UID gives the same names in every process, for the domain's whole life
    assert names.domain_hash(UID_A) == names.domain_hash(str(UID_A))
    for _ in range(200):
        h = names.domain_hash(str(uuid.uuid4()))
        assert re.fullmatch(r"[bcdfghjklmnpqrstvwxz2456789]{1,10}", h), h
        assert LABEL.match(names.dns_name(str(uuid.uuid4()), 9999))


def test_the_hash_is_fnv1a_of_the_uid_in_safe_encoded_decimal() -> None:
    # 32-bit FNV-1a of b"a" is 0xe40c292c = 3826002220; its digits in the safe alphabet
    assert names.domain_hash("a") == "7d6b446664"


def test_two_domains_never_share_a_name() -> None:
    a, b = set(names.dns_names(UID_A, 18)), set(names.dns_names(UID_B, 18))
    assert not a & b
    hashes = {names.domain_hash(str(uuid.uuid4())) for _ in range(2000)}
    assert len(hashes) == 2000


def test_a_domain_without_uid_has_no_names() -> None:
    with pytest.raises(ValueError, match="UID"):
        names.dns_name("", 0)


def test_unused_slots_point_at_the_sentinel() -> None:
    slots = names.dns_names(UID_A, 4)
    block = names.with_unused_slots(slots, {slots[1]: "10.0.0.7"})
    assert block == {slots[0]: "127.0.0.2", slots[1]: "10.0.0.7", slots[2]: "127.0.0.2", slots[3]: "127.0.0.2"}
    assert names.UNUSED_SLOT_IP == "127.0.0.2"
