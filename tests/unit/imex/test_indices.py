"""Index assignment within a clique (the controller's, and a daemon's own fallback)."""

from __future__ import annotations

import pytest

from cdriver.imex.indices import IndexExhausted, assign_indices, entry_index, next_free_index


def entry(node: str, index: object = None, clique: str = "u.0") -> dict:
    out: dict = {"nodeName": node, "ipAddress": "10.0.0.1", "cliqueID": clique, "status": "NotReady"}
    if index is not None:
        out["index"] = index
    return out


def test_entry_index_accepts_only_non_negative_integers() -> None:
    assert entry_index(entry("a", 3)) == 3
    assert [entry_index(entry("a", v)) for v in (None, -1, True, "2", 1.0)] == [None] * 5


def test_next_free_index_fills_holes_and_stops_at_the_maximum() -> None:
    assert next_free_index({0, 2}, 4) == 1
    with pytest.raises(IndexExhausted, match="maxNodesPerIMEXDomain"):
        next_free_index({0, 1}, 2)


def test_missing_indices_get_the_lowest_free_ones_in_list_order() -> None:
    decided = assign_indices([entry("a", 1), entry("b"), entry("c"), entry("d", 0)], 18)
    assert [e.get("index") for e in decided.entries] == [1, 2, 3, 0]
    assert decided.assigned == {"b": 2, "c": 3} and decided.exhausted == []


def test_valid_indices_are_kept_and_nothing_is_written_when_all_are_valid() -> None:
    entries = [entry("a", 0), entry("b", 1)]
    decided = assign_indices(entries, 18)
    assert decided.entries == entries and decided.assigned == {}


def test_a_duplicate_or_out_of_range_index_is_replaced_first_holder_keeps_it() -> None:
    decided = assign_indices([entry("a", 2), entry("b", 2), entry("c", 7), entry("d", "x")], 4)
    assert [e.get("index") for e in decided.entries] == [2, 0, 1, 3]
    assert decided.assigned == {"b": 0, "c": 1, "d": 3}


def test_each_clique_counts_its_own_indices() -> None:
    decided = assign_indices([entry("a", 0, "u.0"), entry("b", None, "u.1"), entry("c", None, "u.0")], 18)
    assert decided.assigned == {"b": 0, "c": 1}


def test_a_full_clique_leaves_the_newcomer_without_an_index_and_says_so() -> None:
    decided = assign_indices([entry("a", 0), entry("b", 1), entry("c")], 2)
    assert decided.assigned == {} and decided.exhausted == ["c"]
    assert "index" not in decided.entries[2]


def test_the_input_is_not_changed() -> None:
    entries = [entry("a")]
    assign_indices(entries, 18)
    assert "index" not in entries[0]
