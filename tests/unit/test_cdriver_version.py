"""One version: the package, its installed metadata and the Helm chart agree."""

from __future__ import annotations

import importlib.metadata

import yaml

import cdriver
from cdriver.checkout import CHART_DIR

CHART = CHART_DIR / "Chart.yaml"


def test_chart_and_package_metadata_carry_the_package_version() -> None:
    chart = yaml.safe_load(CHART.read_text(encoding="utf-8"))
    assert (chart["version"], chart["appVersion"]) == (cdriver.__version__, cdriver.__version__)
    assert importlib.metadata.version("cdriver") == cdriver.__version__
