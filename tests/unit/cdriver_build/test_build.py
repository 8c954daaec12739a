"""The image builder's pure parts: cache keys, the cache protocol, how recipe steps become entries."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

import cdriver
from cdriver.checkout import REPO_ROOT
from cdriver_build import build, containerfile


def test_refs_are_local_and_the_driver_tag_is_the_chart_default() -> None:
    assert build.image_ref("cdriver") == f"localhost/cdriver:v{cdriver.__version__}"
    assert build.image_ref("pause") == f"localhost/pause:{build.PAUSE_VERSION}"
    assert build.image_ref("workload") == f"localhost/workload:{build.WORKLOAD_VERSION}"
    with pytest.raises(build.ImageBuildError, match="choose from cdriver, pause, workload"):
        build.image_ref("nginx")


def test_input_hash_follows_names_contents_and_parts(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("one")
    (tmp_path / "b").write_text("two")
    files = [tmp_path / "a", tmp_path / "b"]
    first = build.input_hash(["x"], files, tmp_path)
    assert build.input_hash(["x"], files, tmp_path) == first
    assert build.input_hash(["y"], files, tmp_path) != first
    (tmp_path / "b").write_text("three")
    assert build.input_hash(["x"], files, tmp_path) != first
    (tmp_path / "c").write_text("three")
    assert build.input_hash(["x"], [tmp_path / "a", tmp_path / "c"], tmp_path) != \
        build.input_hash(["x"], files, tmp_path)


def test_files_under_skips_byte_code(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "Containerfile").write_text("FROM x\n")
    found = build.files_under(tmp_path, ["Containerfile", "pkg", "missing"])
    assert found == [tmp_path / "Containerfile", tmp_path / "pkg" / "mod.py"]


def test_driver_inputs_cover_what_the_image_is_made_from() -> None:
    files = {p.relative_to(REPO_ROOT).as_posix() for p in build.files_under(REPO_ROOT, build.DRIVER_INPUTS)}
    for needed in ("Containerfile", "pyproject.toml", "setup.cfg", "packaging/build.sh", "packaging/cdriver.spec",
                   "cdriver/cli.py", "cdriver/templates/imexd.tmpl.cfg"):
        assert needed in files


def test_bundle_is_packaged_once_for_every_copy_and_the_image(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    packaged: list[Path] = []

    def fake_bundle(root: Path, dist: Path, log: object) -> None:
        packaged.append(dist)
        (dist / "cdriver-bundle").mkdir(parents=True)
        (dist / "cdriver-bundle" / "cdriver").write_text("exe")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_bundle", fake_bundle)
    for dest in (tmp_path / "dist", tmp_path / "dist", tmp_path / "other"):
        exe = build.install_bundle(dest, lambda _: None)
        assert exe == dest / "cdriver" and exe.is_symlink() and exe.read_text() == "exe"
    assert build.ensure_bundle(lambda _: None).parent.name.startswith("bundle-")
    assert len(packaged) == 1
    # a copy, not a link into the cache: the cache keeps its build when dist/ is changed or removed
    (tmp_path / "dist" / "cdriver-bundle" / "cdriver").write_text("changed")
    assert (build.ensure_bundle(lambda _: None) / "cdriver-bundle" / "cdriver").read_text() == "exe"


def test_bundle_inputs_are_the_build_stage_sources() -> None:
    assert set(build.BUNDLE_INPUTS) <= set(build.DRIVER_INPUTS)
    files = {p.relative_to(REPO_ROOT).as_posix() for p in build.files_under(REPO_ROOT, build.BUNDLE_INPUTS)}
    assert {"pyproject.toml", "setup.cfg", "packaging/cdriver.spec", "cdriver/cli.py"} <= files


def test_cached_builds_once_and_marks_completion(tmp_path: Path) -> None:
    calls: list[Path] = []

    def make(tmp: Path) -> None:
        calls.append(tmp)
        (tmp / "out.txt").write_text("done")

    out = tmp_path / "images-x-1"
    assert build.cached(out, make, lambda _: None) == out
    assert build.cached(out, make, lambda _: None) == out
    assert len(calls) == 1
    assert (out / ".complete").is_file() and (out / "out.txt").read_text() == "done"
    assert not list(tmp_path.glob("images-x-1.tmp.*"))


def test_a_failed_build_leaves_nothing_and_the_next_one_runs(tmp_path: Path) -> None:
    out = tmp_path / "images-x-1"

    def fail(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise build.ImageBuildError("boom")

    with pytest.raises(build.ImageBuildError, match="boom"):
        build.cached(out, fail, lambda _: None)
    assert not out.exists() and not list(tmp_path.glob("images-x-1.tmp.*"))
    (tmp_path / "images-x-1.tmp.99999").mkdir()  # left by a build that was killed
    build.cached(out, lambda tmp: (tmp / "ok").write_text("1"), lambda _: None)
    assert (out / "ok").is_file() and not (tmp_path / "images-x-1.tmp.99999").exists()


def test_concurrent_builders_of_one_key_build_once(tmp_path: Path) -> None:
    out = tmp_path / "images-x-1"
    count: list[int] = []
    entered = threading.Event()

    def make(tmp: Path) -> None:
        count.append(1)
        entered.set()
        (tmp / "f").write_text("x")

    threads = [threading.Thread(target=build.cached, args=(out, make, lambda _: None)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert entered.is_set() and len(count) == 1


def test_prune_removes_only_old_unlocked_builds_of_the_same_name(tmp_path: Path) -> None:
    def finished(name: str, age_s: float) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / ".complete").touch()
        stamp = time.time() - age_s
        os.utime(d / ".complete", (stamp, stamp))
        return d

    day = build.PRUNE_AFTER_S
    current = finished("images-cdriver-aaaa", 2 * day)
    old = finished("images-cdriver-bbbb", 2 * day)
    young = finished("images-cdriver-cccc", 60)
    other_name = finished("images-pause-dddd", 2 * day)
    longer_name = finished("images-cdriver-extra-eeee", 2 * day)
    busy = finished("images-cdriver-ffff", 2 * day)
    unfinished = tmp_path / "images-cdriver-gggg"
    unfinished.mkdir()
    with FileLock(str(busy) + ".lock"):
        removed = build.prune_stale(current)
    assert removed == [old]
    for kept in (current, young, other_name, longer_name, busy, unfinished):
        assert kept.exists()


def test_a_cache_hit_marks_the_build_used(tmp_path: Path) -> None:
    out = tmp_path / "images-x-1"
    build.cached(out, lambda tmp: None, lambda _: None)
    os.utime(out / ".complete", (1000, 1000))
    build.cached(out, lambda tmp: pytest.fail("rebuilt"), lambda _: None)
    assert time.time() - (out / ".complete").stat().st_mtime < 3600


def test_mmdebstrap_command_follows_the_recipe() -> None:
    recipe = containerfile.load(REPO_ROOT / "Containerfile")
    argv = build.mmdebstrap_command(recipe)
    assert argv[0] == "mmdebstrap" and argv[-2:] == ["bookworm", "-"]
    assert "--variant=minbase" in argv
    assert "--include=ca-certificates,util-linux" in argv
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in argv
    plain = containerfile.Recipe(suite="trixie", slim=False, packages=[], build_stage="b", build_workdir="/src",
                                 steps=[], env={}, entrypoint=[], cmd=[])
    argv = build.mmdebstrap_command(plain)
    assert not any(a.startswith(("--include", "--dpkgopt")) for a in argv) and argv[-2] == "trixie"


def test_app_entries_take_dist_from_the_build_and_files_from_the_tree(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    (dist / "cdriver-bundle").mkdir(parents=True)
    (dist / "cdriver-bundle" / "cdriver").write_bytes(b"exe")
    recipe = containerfile.load(REPO_ROOT / "Containerfile")
    entries = {e.path: e for e in build.app_entries(recipe, REPO_ROOT, dist)}
    assert entries["/opt/cdriver/cdriver"].source == dist / "cdriver-bundle" / "cdriver"
    assert entries["/templates/compute-domain-daemon-config.tmpl.cfg"].source == \
        REPO_ROOT / "cdriver" / "templates" / "imexd.tmpl.cfg"
    assert entries["/usr/bin/cdriver"].kind == "symlink"
    assert entries["/usr/bin/cdriver"].target == "/opt/cdriver/cdriver"


def test_app_entries_name_a_missing_build_output(tmp_path: Path) -> None:
    recipe = containerfile.load(REPO_ROOT / "Containerfile")
    with pytest.raises(build.ImageBuildError, match="cdriver-bundle does not exist after the build"):
        build.app_entries(recipe, REPO_ROOT, tmp_path / "empty-dist")


def test_busybox_entries_link_every_applet_to_the_binary(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF")
    entries = {e.path: e for e in build.busybox_entries(busybox, ["bin/sh", "usr/bin/awk", "sbin/ip", "bin/busybox"])}
    assert entries["bin/busybox"].mode == 0o755
    assert (entries["bin/sh"].kind, entries["bin/sh"].target) == ("symlink", "../bin/busybox")
    assert entries["usr/bin/awk"].target == "../../bin/busybox"
    assert entries["sbin/ip"].target == "../bin/busybox"
    assert entries["tmp"].mode == 0o1777
    assert b"root:x:0:0" in (entries["etc/passwd"].data or b"")


def test_unknown_image_names_are_refused_before_anything_is_built() -> None:
    with pytest.raises(build.ImageBuildError, match="unknown image nginx"):
        build.ensure_images(["pause", "nginx"])
