"""Run the release builder of this checkout as a process: `python -m cdriver_build.images NAME...`.

The builder lives in packaging/cdriver_build, outside the package, and builds from a source
tree only; this module finds it next to the package, passes its progress through to stderr
and reads back the `<name>=<archive>` and `<name>-ref=<reference>` lines it prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cdriver.sim.images.refs import IMAGE_NAMES, ImageArchive, ImageBuildError

BUILDER_MODULE = "cdriver_build.images"
#: lines of the builder's stderr an error message carries
ERROR_TAIL_LINES = 30


def checkout_root() -> Path:
    """The source checkout this package runs from; ImageBuildError when it is not one."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "packaging" / "cdriver_build" / "images.py").is_file():
        raise ImageBuildError(f"{root} is not a cdriver source tree (no packaging/cdriver_build): "
                              "build images from a checkout with `make images`")
    return root


def builder_argv(names: Iterable[str]) -> list[str]:
    """The builder's command line for `names`."""
    return [sys.executable, "-m", BUILDER_MODULE, *names]


def builder_env(root: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the checkout's packaging/ and root first on PYTHONPATH."""
    base = dict(os.environ if env is None else env)
    paths = [str(root / "packaging"), str(root)] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    base["PYTHONPATH"] = os.pathsep.join(paths)
    return base


def parse_lines(lines: Iterable[str]) -> dict[str, ImageArchive]:
    """{name: ImageArchive} from the builder's `<name>=<archive>` / `<name>-ref=<ref>` lines."""
    archives: dict[str, str] = {}
    refs: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep:
            continue
        if key.endswith("-ref"):
            refs[key[:-len("-ref")]] = value
        else:
            archives[key] = value
    missing = sorted(set(archives) ^ set(refs))
    if missing:
        raise ImageBuildError(f"the image builder printed an archive or a reference without the other for "
                              f"{', '.join(missing)}")
    return {name: ImageArchive(name, refs[name], Path(archives[name])) for name in archives}


def _failure(tail: list[str]) -> str:
    """The builder's error message: from its last `error: ` line on (else its last lines)."""
    starts = [i for i, line in enumerate(tail) if line.startswith("error: ")]
    if not starts:
        return "\n".join(tail)
    return "\n".join(tail[starts[-1]:]).removeprefix("error: ")


def build_images(names: Iterable[str] = IMAGE_NAMES, progress: Callable[[str], None] | None = None,
                 platforms: str | None = None) -> dict[str, ImageArchive]:
    """Build (or find cached) the named images with the checkout's builder; {name: ImageArchive}.

    `platforms` (``linux/amd64,linux/arm64``) are the driver image's (default: this machine's).
    The builder's progress lines go to `progress` (default: this process's stderr); a failed
    build raises ImageBuildError with the last of them.
    """
    wanted = list(dict.fromkeys(names))
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    root = checkout_root()
    argv = builder_argv(wanted) + (["--platform", platforms] if platforms else [])
    proc = subprocess.Popen(argv, cwd=root, env=builder_env(root), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    tail: list[str] = []
    for line in proc.stderr:
        say(line.rstrip("\n"))
        tail = (tail + [line.rstrip("\n")])[-ERROR_TAIL_LINES:]
    out = proc.stdout.read()
    if proc.wait() != 0:
        raise ImageBuildError(_failure(tail) or f"{' '.join(builder_argv(wanted))} exited {proc.returncode}")
    built = parse_lines(out.splitlines())
    absent = [name for name in wanted if name not in built]
    if absent:
        raise ImageBuildError(f"the image builder did not report {', '.join(absent)}")
    return built


UNPACK_MODULE = "cdriver_build.unpack"


@dataclass(frozen=True)
class UnpackedImage:
    """One platform's image unpacked, and what runs its programs on this machine."""

    root: Path
    #: the platform's emulator (None: this machine's platform)
    emulator: Path | None = None
    #: the binfmt_misc entry's name and registration line that hand its programs to the emulator
    binfmt_entry: str = ""
    binfmt: str = ""


def unpack_image(archive: Path, platform: str, dest: Path) -> UnpackedImage:
    """Unpack `archive`'s image of `platform` into the new directory `dest` with the checkout's builder."""
    root = checkout_root()
    argv = [sys.executable, "-m", UNPACK_MODULE, "--platform", platform, str(archive), str(dest)]
    proc = subprocess.run(argv, cwd=root, env=builder_env(root), capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-ERROR_TAIL_LINES:]
        raise ImageBuildError(_failure(tail) or f"{' '.join(argv)} exited {proc.returncode}")
    lines = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    if "root" not in lines:
        raise ImageBuildError(f"{' '.join(argv)} printed no root= line")
    emulator = lines.get("emulator")
    return UnpackedImage(Path(lines["root"]), Path(emulator) if emulator else None, lines.get("binfmt-entry", ""),
                         lines.get("binfmt", ""))
