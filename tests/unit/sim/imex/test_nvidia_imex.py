"""The nvidia-imex stand-in's log follows the config's LOG_LEVEL as the real daemon's does."""

from __future__ import annotations

import logging

import pytest

from cdriver.imex.config import ImexConfig
from cdriver.sim.imex import nvidia_imex


@pytest.mark.parametrize(("level", "shown", "hidden"), [
    ("4", logging.INFO, logging.DEBUG), ("3", logging.WARNING, logging.INFO), ("2", logging.ERROR, logging.WARNING),
    ("1", logging.CRITICAL, logging.ERROR)])
def test_log_level_of_the_config_filters_the_stand_ins_log(
        monkeypatch: pytest.MonkeyPatch, level: str, shown: int, hidden: int) -> None:
    monkeypatch.delenv("CDRIVER_SIM_IMEX_DEBUG", raising=False)
    log = nvidia_imex._make_logger(ImexConfig.from_values({"LOG_LEVEL": level}))
    assert log.isEnabledFor(shown) and not log.isEnabledFor(hidden)


def test_log_level_0_turns_the_log_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDRIVER_SIM_IMEX_DEBUG", raising=False)
    log = nvidia_imex._make_logger(ImexConfig.from_values({"LOG_LEVEL": "0"}))
    assert not log.isEnabledFor(logging.CRITICAL)
