"""The start-up configuration line every role logs once: versions, the effective gates (every
known one), and each setting, sorted."""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import pytest

from cdriver import KUBERNETES_VERSION, __version__
from cdriver.featuregates import KNOWN_GATES, FeatureGates
from cdriver.roles.startup_log import log_startup_configuration, startup_configuration


def test_the_line_names_versions_every_gate_and_every_setting() -> None:
    gates = FeatureGates.parse("ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false")
    config = startup_configuration(
        "controller", {"namespace": "drv", "kubeconfig": None, "cdi_root": Path("/var/run/cdi"),
                       "feature_gates": "ComputeDomainCliques=false", "secrets": ("a", "b")},
        gates, {"verbosity": 6, "log_format": "json"})
    line = config.line()
    assert line.startswith(f"start-up configuration of controller: cdriver {__version__} (python "
                           f"{platform.python_version()}, Kubernetes API {KUBERNETES_VERSION}); feature gates: ")
    assert set(config.gates) == set(KNOWN_GATES)
    assert "ComputeDomainCliques=false" in line and "IMEXDaemonsWithDNSNames=false" in line
    assert line.endswith("; settings: cdi_root='/var/run/cdi', kubeconfig=None, log_format='json', "
                         "log_verbosity=6, namespace='drv', secrets='a,b'")


def test_without_gates_the_defaults_are_named_and_verbosity_defaults_to_0() -> None:
    config = startup_configuration("host-check", {"mode": "hostManaged"}, None, {})
    assert config.gates == FeatureGates().to_map()
    assert dict(config.settings) == {"log_format": "text", "log_verbosity": 0, "mode": "hostManaged"}


def test_it_is_logged_at_info_so_verbosity_0_shows_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        log_startup_configuration("imex-daemon", {"cd_uid": "u1"}, None, {})
    (record,) = [r for r in caplog.records if r.name == "cdriver.roles.startup_log"]
    assert record.levelno == logging.INFO and "start-up configuration of imex-daemon" in record.getMessage()
