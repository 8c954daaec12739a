"""`cdriver sim images` and real nodes run the release builder as a process and read its lines."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from cdriver.sim.images import builder
from cdriver.sim.images.refs import ImageBuildError, image_ref

ROOT = Path(__file__).resolve().parents[4]


def test_the_builder_is_found_in_the_checkout_next_to_the_package() -> None:
    assert builder.checkout_root() == ROOT
    assert builder.builder_argv(["pause"]) == [sys.executable, "-m", "cdriver_build.images", "pause"]
    env = builder.builder_env(ROOT, {"PYTHONPATH": "/elsewhere", "HOME": "/root"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT / "packaging"), str(ROOT), "/elsewhere"]
    assert env["HOME"] == "/root"


def test_archive_and_reference_lines_are_read_back() -> None:
    built = builder.parse_lines(["pause=/c/images-pause-1/pause.tar", f"pause-ref={image_ref('pause')}",
                                 "", "not a result line"])
    assert built == {"pause": builder.ImageArchive("pause", image_ref("pause"), Path("/c/images-pause-1/pause.tar"))}
    assert built["pause"].lines() == ["pause=/c/images-pause-1/pause.tar", f"pause-ref={image_ref('pause')}"]
    with pytest.raises(ImageBuildError, match="without the other for workload"):
        builder.parse_lines(["workload=/c/workload.tar"])


def _fake_builder(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    monkeypatch.setattr(builder, "builder_argv", lambda names: [sys.executable, "-c", script, *names])


def test_build_images_passes_progress_through_and_returns_the_archives(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_builder(monkeypatch, "import sys\n"
                               "print('[images] building', file=sys.stderr)\n"
                               "for n in sys.argv[1:]:\n"
                               "    print(f'{n}=/c/{n}.tar')\n"
                               "    print(f'{n}-ref=localhost/{n}:1')\n")
    progress: list[str] = []
    built = builder.build_images(["pause", "workload", "pause"], progress.append)
    assert progress == ["[images] building"]
    assert {n: (i.ref, i.archive) for n, i in built.items()} == {
        "pause": ("localhost/pause:1", Path("/c/pause.tar")),
        "workload": ("localhost/workload:1", Path("/c/workload.tar")),
    }


def test_a_failed_build_carries_the_builders_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_builder(monkeypatch, "import sys\n"
                               "print('[images] making the root file system', file=sys.stderr)\n"
                               "print('error: mmdebstrap failed (exit 1)\\nE: no network', file=sys.stderr)\n"
                               "sys.exit(1)\n")
    with pytest.raises(ImageBuildError) as info:
        builder.build_images(["cdriver"], lambda _: None)
    assert str(info.value) == "mmdebstrap failed (exit 1)\nE: no network"


def test_a_build_that_reports_less_than_asked_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_builder(monkeypatch, "print('pause=/c/pause.tar'); print('pause-ref=localhost/pause:1')")
    with pytest.raises(ImageBuildError, match="did not report workload"):
        builder.build_images(["pause", "workload"], lambda _: None)


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_package_never_imports_the_release_builder() -> None:
    importers = [p.relative_to(ROOT).as_posix() for p in (ROOT / "cdriver").rglob("*.py")
                 if any(name.split(".")[0] == "cdriver_build" for name in _imported(p))]
    assert importers == []
