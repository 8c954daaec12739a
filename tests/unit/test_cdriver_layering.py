"""The root layers contract in `.importlinter` names every top-level module of the package,
so a new module cannot fall outside the layering rules."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cdriver"
CONTRACT = "importlinter:contract:package-layers"


def _contract_layers() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    assert config[CONTRACT]["type"] == "layers"
    assert config[CONTRACT]["containers"].split() == ["cdriver"]
    return [line.strip() for line in config[CONTRACT]["layers"].splitlines() if line.strip()]


def _named(layers: list[str]) -> tuple[set[str], set[str]]:
    """(required, optional) module names of the layers (`(name)` marks an optional one)."""
    required: set[str] = set()
    optional: set[str] = set()
    for layer in layers:
        for part in re.split(r"[|:]", layer):
            name = part.strip()
            if name.startswith("(") and name.endswith(")"):
                optional.add(name[1:-1].strip())
            else:
                required.add(name)
    return required, optional


def _top_level_modules() -> set[str]:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    modules |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return modules


def test_every_top_level_module_is_in_the_root_layers() -> None:
    required, optional = _named(_contract_layers())
    missing = sorted(_top_level_modules() - required - optional)
    assert not missing, f"add {missing} to a layer of [{CONTRACT}] in .importlinter"


def test_the_root_layers_name_only_modules_that_exist() -> None:
    required, _ = _named(_contract_layers())
    assert sorted(required - _top_level_modules()) == []
