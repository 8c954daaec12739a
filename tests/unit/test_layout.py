"""The unit tests mirror the package: every test file names a module that exists.

The rule, for a file `tests/unit/<path>/test_<stem>.py`:

- its source folder is `cdriver/<path>`, or `packaging/<path>` for the release builder
  (`<path>` starting with `cdriver_build`), or `hack/<path>` for the development scripts
  (`<path>` starting with `hack`, whose modules may be shell scripts: `<name>.sh`), or
  `bench/` for the benchmarks' modules (`<path>` being `bench`; scripts importing each other
  from their folder, no package);
- some `<name>` names a module of that folder (`<name>.py`), where `<name>` is `<stem>` or
  `<stem>` cut at an underscore, the rest a topic (`test_prepare_deleting.py` tests
  `prepare.py`);
- or `<name>` is the name of the source folder itself: tests of the package as a whole or of
  several of its modules at once (`roles/controller/test_controller_support.py`,
  `test_cdriver_version.py` for `cdriver/__init__.py`).

This file checks the tests, not a module, and is exempt. Every folder holding tests has an
`__init__.py`, so that basenames may repeat (`test_cli.py`).
"""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).resolve().parent
ROOT = UNIT.parents[1]
EXEMPT = {Path("test_layout.py")}


def source_folder(relative_dir: Path) -> Path:
    """The source folder that `tests/unit/<relative_dir>` mirrors."""
    if relative_dir.parts[:1] == ("cdriver_build",):
        return ROOT / "packaging" / relative_dir
    if relative_dir.parts[:1] in (("hack",), ("bench",)):
        return ROOT / relative_dir
    return ROOT / "cdriver" / relative_dir


def names_of(stem: str) -> list[str]:
    """`<stem>` and each prefix of it that ends before an underscore, longest first."""
    parts = stem.split("_")
    return ["_".join(parts[:n]) for n in range(len(parts), 0, -1)]


def names_a_module(test_file: Path) -> bool:
    """Whether `tests/unit/<path>/test_<stem>.py` names a module (or its package) that exists."""
    relative = test_file.relative_to(UNIT)
    folder = source_folder(relative.parent)
    scripts = relative.parts[0] in ("hack", "bench")
    if not scripts and not (folder / "__init__.py").is_file():
        return False
    stem = relative.stem.removeprefix("test_")
    suffixes = (".py", ".sh") if relative.parts[0] == "hack" else (".py",)
    return any(any((folder / f"{name}{suffix}").is_file() for suffix in suffixes) or name == folder.name
               for name in names_of(stem))


def unit_test_files() -> list[Path]:
    return sorted(p for p in UNIT.rglob("test_*.py") if p.relative_to(UNIT) not in EXEMPT)


def test_every_unit_test_file_names_a_module_that_exists() -> None:
    offending = [str(p.relative_to(ROOT)) for p in unit_test_files() if not names_a_module(p)]
    assert not offending, ("these unit test files name no module that exists (tests/unit/<path>/"
                           f"test_<module>[_<topic>].py mirrors cdriver/<path>/<module>.py): {offending}")


def test_every_folder_of_unit_tests_is_a_package() -> None:
    missing = sorted({str(p.parent.relative_to(ROOT)) for p in unit_test_files()
                      if not (p.parent / "__init__.py").is_file()})
    assert not missing, f"add an __init__.py to {missing}"


def test_the_rule_accepts_topics_and_package_level_tests() -> None:
    assert names_of("prepare_deleting") == ["prepare_deleting", "prepare"]
    assert names_a_module(UNIT / "roles" / "kubelet_plugin" / "test_prepare_deleting.py")
    assert names_a_module(UNIT / "roles" / "controller" / "test_controller_support.py")
    assert names_a_module(UNIT / "test_cdriver_version.py")
    assert names_a_module(UNIT / "cdriver_build" / "test_oci.py")
    assert names_a_module(UNIT / "hack" / "test_plan.py")
    assert not names_a_module(UNIT / "hack" / "test_nothing_here.py")
    assert names_a_module(UNIT / "bench" / "test_versus_figures.py")
    assert not names_a_module(UNIT / "bench" / "test_nothing_here.py")
    assert not names_a_module(UNIT / "test_controller_desired.py")
    assert not names_a_module(UNIT / "nowhere" / "test_nowhere.py")
