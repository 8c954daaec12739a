"""The shared decoder vocabulary: one wording for one mistake, strict JSON and YAML, bounded reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cdriver.decoding import (
    DecodeError,
    TooLarge,
    duplicate_key,
    is_integer,
    read_bounded,
    short,
    strict_json_loads,
    strict_yaml_load,
    type_name,
    unknown_field,
    unknown_fields,
    wrong_type,
)


@pytest.mark.parametrize("value, name", [
    (None, "null"), (True, "boolean"), (3, "integer"), (1.5, "number"), ("x", "string"), ([], "list"),
    ({}, "object"), (b"x", "bytes"),
])
def test_type_names_are_the_json_ones(value: object, name: str) -> None:
    assert type_name(value) == name


def test_wrong_type_names_expectation_type_and_value() -> None:
    assert wrong_type("an integer", "3") == "expected an integer, got string '3'"
    assert wrong_type("an object", [1]) == "expected an object, got list [1]"


def test_short_cuts_long_values_and_says_how_long() -> None:
    assert short("abc") == "'abc'"
    text = short("x" * 200)
    assert text.startswith("'xxx") and text.endswith("...(202 chars)") and len(text) < 100


def test_booleans_are_not_integers() -> None:
    assert is_integer(0) and is_integer(-1)
    assert not is_integer(True) and not is_integer(1.0) and not is_integer("1")


def test_unknown_fields_are_sorted_and_worded_with_the_fix() -> None:
    assert unknown_fields({"b": 1, "a": 2, "ok": 3}, ("ok",)) == ["a", "b"]
    assert unknown_field("a", ("ok", "fine")) == "unknown field 'a' (allowed: ok, fine); remove it or fix its spelling"
    assert "(allowed: none)" in unknown_field("a", ())


def test_strict_json_refuses_duplicates_and_non_numbers() -> None:
    assert strict_json_loads('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    with pytest.raises(DecodeError, match=duplicate_key("a")):
        strict_json_loads('{"a": 1, "a": 2}')
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(DecodeError, match=f"{constant} is not valid JSON"):
            strict_json_loads(f'{{"a": {constant}}}')
    with pytest.raises(json.JSONDecodeError):
        strict_json_loads("{")


def test_strict_yaml_refuses_duplicates_with_their_line() -> None:
    assert strict_yaml_load("a: 1\nb: [x]\n") == {"a": 1, "b": ["x"]}
    with pytest.raises(DecodeError) as err:
        strict_yaml_load("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert err.value.line == 4 and str(err.value) == "duplicate key 'c'; keep only one"
    with pytest.raises(yaml.YAMLError):
        strict_yaml_load("a: [\n")


def test_read_bounded_reads_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    assert read_bounded(path, 5) == b"12345"
    with pytest.raises(TooLarge, match="larger than 4 bytes"):
        read_bounded(path, 4)
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent", 4)
