"""The Containerfile is the one description of the driver image: the daemon-less build reads it."""

from __future__ import annotations

import pytest

from cdriver.checkout import REPO_ROOT
from cdriver_build import containerfile
from cdriver_build.containerfile import Copy, Symlink

TWO_STAGES = """\
# comment
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY cdriver ./cdriver
RUN python -m venv .venv \\
    && PYINSTALLER=.venv/bin/pyinstaller packaging/build.sh

FROM debian:trixie
RUN apt-get update && apt-get install -y --no-install-recommends tini \\
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/dist/cdriver-bundle /opt/cdriver
RUN ln -s /opt/cdriver/cdriver /usr/bin/cdriver
ENV MODE=test
ENTRYPOINT ["tini", "--", "cdriver"]
CMD ["--help"]
"""


def test_the_repository_containerfile_is_realisable() -> None:
    recipe = containerfile.load(REPO_ROOT / "Containerfile")
    assert (recipe.suite, recipe.slim) == ("bookworm", True)
    assert recipe.packages == ["ca-certificates", "util-linux"]
    assert recipe.entrypoint == ["cdriver"]
    assert Copy("build", "/src/dist/cdriver-bundle", "/opt/cdriver") in recipe.steps
    assert Symlink("/opt/cdriver/cdriver", "/usr/bin/cdriver") in recipe.steps
    assert any(isinstance(s, Copy) and s.dest == "/templates/compute-domain-daemon-config.tmpl.cfg"
               for s in recipe.steps)


def test_parse_reads_the_final_stage() -> None:
    recipe = containerfile.parse(TWO_STAGES)
    assert (recipe.suite, recipe.slim, recipe.packages) == ("trixie", False, ["tini"])
    assert recipe.build_stage == "build" and recipe.build_workdir == "/src"
    assert recipe.steps == [Copy("build", "/src/dist/cdriver-bundle", "/opt/cdriver"),
                            Symlink("/opt/cdriver/cdriver", "/usr/bin/cdriver")]
    assert recipe.env == {"MODE": "test"}
    assert recipe.entrypoint == ["tini", "--", "cdriver"] and recipe.cmd == ["--help"]
    assert recipe.workdir == ""
    several = containerfile.parse(TWO_STAGES.replace("ENV MODE=test", 'ENV A=1 B="two words"\nENV C three words'))
    assert several.env == {"A": "1", "B": "two words", "C": "three words"}
    assert containerfile.parse(TWO_STAGES.replace("ENV MODE=test", "WORKDIR /var/lib/cdriver")).workdir == \
        "/var/lib/cdriver"
    assert containerfile.source_in_build(recipe, "/src/dist/cdriver-bundle") == "dist/cdriver-bundle"


@pytest.mark.parametrize(("change", "message"), [
    (("FROM debian:trixie", "FROM alpine:3.20"), "only debian:<suite>"),
    (("ENV MODE=test", "USER nobody"), "line 13 .USER.: the daemon-less build does not realise USER"),
    (("RUN ln -s /opt/cdriver/cdriver /usr/bin/cdriver", "RUN useradd cdriver"),
     "line 12 .RUN.: 'useradd cdriver': only `apt-get install` and `ln -s`"),
    (("COPY --from=build /src/dist/cdriver-bundle /opt/cdriver", "COPY cdriver /opt/cdriver"),
     "can only COPY --from=<stage>"),
    (("packaging/build.sh", "make binary"), "does not run packaging/build.sh"),
    (("COPY --from=build", "COPY --from=other"), "exactly one build stage"),
])
def test_what_cannot_be_realised_is_refused_by_line(change: tuple[str, str], message: str) -> None:
    with pytest.raises(containerfile.ContainerfileError, match=message):
        containerfile.parse(TWO_STAGES.replace(*change))


def test_a_single_stage_is_refused() -> None:
    with pytest.raises(containerfile.ContainerfileError, match="two FROM lines"):
        containerfile.parse("FROM debian:bookworm\nENTRYPOINT [\"sh\"]\n")


def test_copy_sources_outside_the_build_workdir_are_refused() -> None:
    recipe = containerfile.parse(TWO_STAGES)
    with pytest.raises(containerfile.ContainerfileError, match="not below the stage's WORKDIR /src"):
        containerfile.source_in_build(recipe, "/etc/passwd")
