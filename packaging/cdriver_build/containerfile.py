"""Read the driver image's recipe from the Containerfile, so it stays the one description.

The daemon-less build (`cdriver_build.build`) realises the Containerfile rather than
repeating it: the build stage is `packaging/build.sh` run with this machine's Python, and the
final stage becomes a Debian root file system made from the same packages, plus the COPY and
`ln -s` steps, the environment and the entry point. Only the instructions the Containerfile
uses are understood; anything else is refused by line, so a change to the Containerfile that
the realiser cannot follow fails loudly instead of building a different image.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cdriver.errors import CdriverError

#: the build stage's command that makes the bundle; the realiser runs the same script
BUILD_SCRIPT = "packaging/build.sh"
_DEBIAN_BASE = re.compile(r"^debian:(?P<suite>[a-z]+)(?P<slim>-slim)?$")


class ContainerfileError(CdriverError):
    """The Containerfile holds something the daemon-less build cannot realise."""


@dataclass(frozen=True)
class Copy:
    """``COPY --from=<stage> <source> <dest>``: source is a path inside that stage."""

    stage: str
    source: str
    dest: str


@dataclass(frozen=True)
class Symlink:
    """``RUN ln -s <target> <link>``."""

    target: str
    link: str


@dataclass
class Stage:
    """One FROM ... stage."""

    base: str
    name: str
    workdir: str = "/"
    runs: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    steps: list[Copy | Symlink] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    other_runs: list[str] = field(default_factory=list)      # RUN lines that are neither of the above
    context_copies: list[str] = field(default_factory=list)  # COPY from the build context


@dataclass(frozen=True)
class Recipe:
    """The final image as the Containerfile describes it."""

    suite: str                  # Debian suite of the base (e.g. bookworm)
    slim: bool                  # a -slim base: no documentation, manuals or locales
    packages: list[str]         # installed on top of the minimal base
    build_stage: str            # name of the stage that makes the bundle
    build_workdir: str          # its WORKDIR: COPY --from sources are below it
    steps: list[Copy | Symlink]
    env: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    workdir: str = ""           # the final stage's WORKDIR, if any


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[int, str, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    if buf:
        raise ContainerfileError(f"line {start}: the file ends inside a continued line")
    return out


def _json_or_shell(args: str) -> list[str]:
    if args.startswith("["):
        value = json.loads(args)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("not a JSON list of strings")
        return value
    return ["/bin/sh", "-c", args]


def _apt_packages(command: str) -> list[str] | None:
    """Packages of an `apt-get install` in a RUN line, or None when it installs nothing."""
    packages: list[str] = []
    found = False
    for part in command.split("&&"):
        words = shlex.split(part)
        if words[:2] == ["apt-get", "install"]:
            found = True
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages if found else None


def _symlink(command: str) -> Symlink | None:
    words = shlex.split(command)
    if len(words) == 4 and words[:2] == ["ln", "-s"]:
        return Symlink(words[2], words[3])
    return None


def _stage_step(stage: Stage, number: int, word: str, args: str) -> None:
    where = f"line {number} ({word})"
    if word == "WORKDIR":
        stage.workdir = args
    elif word == "RUN":
        stage.runs.append(args)
        packages = _apt_packages(args)
        link = _symlink(args)
        if packages is not None:
            stage.packages += packages
        elif link is not None:
            stage.steps.append(link)
        else:
            stage.other_runs.append(f"{where}: {args!r}")
    elif word == "COPY":
        words = shlex.split(args)
        source_stage = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), "")
        paths = [w for w in words if not w.startswith("--")]
        if source_stage and len(paths) == 2:
            stage.steps.append(Copy(source_stage, paths[0], paths[1]))
        else:
            stage.context_copies.append(f"{where}: {args!r}")
    elif word == "ENV":
        words = shlex.split(args)
        if words and all("=" in w for w in words):  # ENV A=1 B="two words"
            stage.env.update(w.partition("=")[::2] for w in words)
        elif len(words) >= 2:  # the legacy form: ENV A value with spaces
            stage.env[words[0]] = " ".join(words[1:])
        else:
            raise ContainerfileError(f"{where}: expected ENV <key>=<value> ...")
    elif word in ("ENTRYPOINT", "CMD"):
        try:
            argv = _json_or_shell(args)
        except ValueError as e:
            raise ContainerfileError(f"{where}: {e}") from None
        if word == "ENTRYPOINT":
            stage.entrypoint = argv
        else:
            stage.cmd = argv
    else:
        raise ContainerfileError(f"{where}: the daemon-less build does not realise {word}; "
                                 "extend cdriver_build.containerfile or keep to the instructions it knows")


def parse(text: str) -> Recipe:
    """The recipe of the last stage of a Containerfile (ContainerfileError when it cannot be realised)."""
    stages: list[Stage] = []
    for number, word, args in _instructions(text):
        if word == "FROM":
            parts = args.split()
            if len(parts) == 1:
                stages.append(Stage(base=parts[0], name=str(len(stages))))
            elif len(parts) == 3 and parts[1].upper() == "AS":
                stages.append(Stage(base=parts[0], name=parts[2]))
            else:
                raise ContainerfileError(f"line {number} (FROM): expected `FROM <image> [AS <name>]`")
            continue
        if not stages:
            raise ContainerfileError(f"line {number} ({word}): comes before the first FROM")
        _stage_step(stages[-1], number, word, args)
    if len(stages) < 2:
        raise ContainerfileError("expected a build stage and a final stage (two FROM lines)")
    final, builders = stages[-1], {s.name: s for s in stages[:-1]}
    m = _DEBIAN_BASE.match(final.base)
    if not m:
        raise ContainerfileError(f"final stage base {final.base!r}: only debian:<suite>[-slim] can be made "
                                 "without a registry (from Debian's packages)")
    for what in final.other_runs:
        raise ContainerfileError(f"{what}: only `apt-get install` and `ln -s` can be realised in the final stage")
    for what in final.context_copies:
        raise ContainerfileError(f"{what}: the final stage can only COPY --from=<stage> <one source> <dest>")
    used = {step.stage for step in final.steps if isinstance(step, Copy)}
    if len(used) != 1 or next(iter(used)) not in builders:
        raise ContainerfileError(f"the final stage must copy from exactly one build stage, not {sorted(used)}")
    build = builders[next(iter(used))]
    if not any(BUILD_SCRIPT in run for run in build.runs):
        raise ContainerfileError(f"build stage {build.name!r} does not run {BUILD_SCRIPT}: the daemon-less build "
                                 "makes the bundle with that script, so it would not match the Containerfile")
    return Recipe(suite=m.group("suite"), slim=bool(m.group("slim")), packages=final.packages,
                  build_stage=build.name, build_workdir=build.workdir, steps=final.steps, env=final.env,
                  entrypoint=final.entrypoint, cmd=final.cmd, workdir=final.workdir if final.workdir != "/" else "")


def load(path: Path) -> Recipe:
    try:
        text = path.read_text()
    except OSError as e:
        raise ContainerfileError(f"cannot read {path}: {e.strerror}") from None
    try:
        return parse(text)
    except ContainerfileError as e:
        raise ContainerfileError(f"{path}: {e}") from None


def source_in_build(recipe: Recipe, source: str) -> str:
    """A COPY --from source as a path relative to the build stage's WORKDIR (the source tree)."""
    root = recipe.build_workdir.rstrip("/") + "/"
    if not source.startswith(root):
        raise ContainerfileError(f"COPY --from={recipe.build_stage} {source}: not below the stage's "
                                 f"WORKDIR {recipe.build_workdir}")
    return source[len(root):]
