"""The nvidia-imex settings operators tune: upstream's defaults, accepted values, the messages
that name a bad value's key, range and default, and the same table in the chart."""

from __future__ import annotations

import logging
import re

import pytest
import yaml

from cdriver.checkout import CHART_DIR
from cdriver.imex import config
from cdriver.imex.settings import (
    BY_KEY,
    DEFAULT_SETTINGS,
    TUNABLES,
    ImexSettingError,
    ImexSettings,
    config_problems,
    log_threshold,
    mismatches,
)

#: Upstream's daemon config template at the reference commit sets these.
UPSTREAM_DEFAULTS = {"IMEX_NODE_DISCONNECTED_GRACE_TIME": "-1", "LOG_LEVEL": "4", "IMEX_WAIT_FOR_QUORUM": "RECOVERY"}


def test_defaults_are_upstreams_and_the_packaged_template_renders_them() -> None:
    assert dict(DEFAULT_SETTINGS.values) == UPSTREAM_DEFAULTS
    rendered = config.parse_config(config.render_config(config.load_template(), "/imexd/nodes.cfg", "10.0.0.1"))
    assert {key: rendered[key] for key in UPSTREAM_DEFAULTS} == UPSTREAM_DEFAULTS
    assert DEFAULT_SETTINGS.changed() == {}


@pytest.mark.parametrize(
    ("key", "raw", "written"),
    [
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1", "-1"),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "0", "0"),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", 300, "300"),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", " 2147483647 ", "2147483647"),
        ("LOG_LEVEL", "0", "0"),
        ("LOG_LEVEL", "4", "4"),
        ("IMEX_WAIT_FOR_QUORUM", "NONE", "NONE"),
    ],
)
def test_accepted_values_are_written_as_nvidia_imex_reads_them(key: str, raw: object, written: str) -> None:
    settings = ImexSettings.parse({key: raw})
    assert settings.values[key] == written
    assert {k: v for k, v in settings.values.items() if k != key} == {
        k: v for k, v in UPSTREAM_DEFAULTS.items() if k != key}


@pytest.mark.parametrize(
    ("key", "raw", "fragments"),
    [
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-2", ["-1 (wait indefinitely)", "(default -1)"]),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "2147483648", ["seconds from 1 to 2147483647"]),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "5m", ["'5m' is not valid"]),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", True, ["True is not valid"]),
        ("LOG_LEVEL", "5", ["from 0 (logging off) to 4", "(default 4)"]),
        ("IMEX_WAIT_FOR_QUORUM", "recovery", ["RECOVERY", "or NONE", "(default RECOVERY)"]),
    ],
)
def test_a_bad_value_names_the_setting_what_it_accepts_and_the_default(
        key: str, raw: object, fragments: list[str]) -> None:
    with pytest.raises(ImexSettingError) as err:
        ImexSettings.parse({key: raw}, lambda t: t.option)
    message = str(err.value)
    assert message.startswith(f"{BY_KEY[key].flag} (env {BY_KEY[key].env})=")
    assert f"not valid for {key}" in message
    for fragment in fragments:
        assert fragment in message


def test_a_rendered_config_must_carry_the_settings() -> None:
    tuned = ImexSettings.parse({"LOG_LEVEL": "2"})
    assert mismatches({"LOG_LEVEL": "2"}, tuned, "t") == []
    assert mismatches({}, DEFAULT_SETTINGS, "t") == []  # nvidia-imex's own default applies
    (problem,) = mismatches({"LOG_LEVEL": "4"}, tuned, "t")
    assert "t: LOG_LEVEL is '4' but the driver is set to '2'" in problem
    assert "LOG_LEVEL={{ log_level }}" in problem
    assert mismatches({}, tuned, "t") != []


def test_config_problems_name_a_tuned_key_nvidia_imex_would_refuse() -> None:
    assert config_problems({"LOG_LEVEL": "3", "OTHER": "x"}, "c.cfg") == []
    (problem,) = config_problems({"IMEX_WAIT_FOR_QUORUM": "SOMETIMES"}, "c.cfg")
    assert problem.startswith("c.cfg: IMEX_WAIT_FOR_QUORUM='SOMETIMES' is not valid")


@pytest.mark.parametrize(("level", "passes", "dropped"), [
    ("0", None, logging.CRITICAL), ("1", logging.CRITICAL, logging.ERROR), ("2", logging.ERROR, logging.WARNING),
    ("3", logging.WARNING, logging.INFO), ("4", logging.INFO, logging.DEBUG)])
def test_log_level_filters_as_nvidia_imex_does(level: str, passes: int | None, dropped: int) -> None:
    threshold = log_threshold({"LOG_LEVEL": level})
    assert passes is None or passes >= threshold
    assert dropped < threshold


def test_log_level_unset_or_invalid_is_info() -> None:
    assert log_threshold({}) == log_threshold({"LOG_LEVEL": "x"}) == logging.INFO


def test_the_chart_offers_every_setting_with_the_same_default_and_variable() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["imex"]["daemonConfig"]
    assert {name: str(v) for name, v in values.items()} == {t.value_name: t.default for t in TUNABLES}
    table = (CHART_DIR / "templates" / "_imex_daemon_config.tpl").read_text()
    for t in TUNABLES:
        entry = f'"name" "{t.value_name}" "env" "{t.env}" "default" "{t.default}"'
        assert entry in table
        assert re.search(re.escape(f'"allowed" "{t.allowed}"'), table)
