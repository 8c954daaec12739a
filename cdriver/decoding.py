"""The words and checks every strict decoder of outside input shares.

ComputeDomain objects and opaque configs (`cdriver.api.types`), CDI specs (`cdriver.cdi`), IMEX
configs (`cdriver.imex.config`) and topology documents (`cdriver.sim.gpu.topology`) each frame
their messages with their own location (file, field path); the problem itself is worded here,
so the same mistake reads the same everywhere: ``expected an integer, got string '3'``,
``unknown field 'x' (allowed: a, b); remove it or fix its spelling``, ``duplicate key 'x';
keep only one``, ``NaN is not valid JSON``.

Each module raises its own error class; the loaders here raise `DecodeError`, which callers
re-raise with their location.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import yaml

#: longest rendering of a value inside a message
SHORT_LIMIT = 80

_TYPE_NAMES: dict[type, str] = {type(None): "null", bool: "boolean", int: "integer", float: "number",
                                str: "string", list: "list", dict: "object"}


class DecodeError(ValueError):
    """Input is not well-formed; `line` is the 1-based line where known (YAML), else 0."""

    def __init__(self, problem: str, line: int = 0) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


class TooLarge(DecodeError):
    """A file is larger than its reader accepts."""


def type_name(value: object) -> str:
    """The JSON name of a value's type: null, boolean, integer, number, string, list, object."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def short(value: object, limit: int = SHORT_LIMIT) -> str:
    """``repr(value)``, cut after `limit` characters (saying how long it was)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def is_integer(value: object) -> TypeGuard[int]:
    """An integer, not a boolean (JSON and YAML booleans are Python ints)."""
    return isinstance(value, int) and not isinstance(value, bool)


def wrong_type(expected: str, value: object) -> str:
    """``expected <expected>, got <type> <value>``; `expected` carries its article ("an object")."""
    return f"expected {expected}, got {type_name(value)} {short(value)}"


def unknown_fields(obj: Mapping[Any, Any], allowed: Iterable[str]) -> list[str]:
    """The keys of `obj` not in `allowed`, sorted."""
    known = set(allowed)
    return sorted(str(k) for k in obj if k not in known)


def unknown_field(name: object, allowed: Iterable[str]) -> str:
    """The problem of one unknown field."""
    return f"unknown field {short(name)} (allowed: {', '.join(allowed) or 'none'}); remove it or fix its spelling"


def duplicate_key(key: object) -> str:
    """The problem of a key given twice in one object."""
    return f"duplicate key {short(key)}; keep only one"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DecodeError(duplicate_key(key))
        out[key] = value
    return out


def _no_constant(name: str) -> None:
    raise DecodeError(f"{name} is not valid JSON")


def strict_json_loads(text: str) -> Any:
    """`json.loads` that refuses duplicate keys and NaN/Infinity (`DecodeError`); syntax errors
    stay `json.JSONDecodeError` (with line and column)."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


class StrictYAMLLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: StrictYAMLLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise DecodeError(duplicate_key(key), line=key_node.start_mark.line + 1)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictYAMLLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def strict_yaml_load(text: str) -> Any:
    """One YAML document, refusing duplicate keys (`DecodeError` with its line); syntax errors
    stay `yaml.YAMLError`."""
    loader = StrictYAMLLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a file of at most `limit` bytes, never reading more than one byte past it.

    Raises `TooLarge` for a bigger file and `OSError` when it cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"larger than {limit} bytes")
    return data
