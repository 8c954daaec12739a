"""IMEX mode / isolation / feature-gate validation: every combination, one message per problem."""

from __future__ import annotations

import itertools

import pytest

from cdriver import featuregates
from cdriver.api.imex_mode import ImexConfigError, resolve_imex_config
from cdriver.featuregates import FeatureGateError, FeatureGates

# Each problem the validator can report, and the fragment its message must contain.
MESSAGES = {
    "needs-gate": "needs the HostManagedIMEXDaemon feature gate",
    "unknown-mode": "unknown imex mode",
    "channel-reserved": "is not supported yet",
    "unknown-isolation": "unknown imex isolation",
    "cliques-need-dns": "ComputeDomainCliques requires IMEXDaemonsWithDNSNames",
}

# mode -> problem with the HostManagedIMEXDaemon gate (off, on)
MODE_TABLE = {
    "driverManaged": (None, None),
    "hostManaged": ("needs-gate", None),
    "": ("unknown-mode", "unknown-mode"),
    "HostManaged": ("unknown-mode", "unknown-mode"),
    "host": ("unknown-mode", "unknown-mode"),
}
ISOLATION_TABLE = {
    "": None,
    "domain": None,
    "channel": "channel-reserved",
    "Domain": "unknown-isolation",
    "node": "unknown-isolation",
}
# extra gate settings -> problem unless the mode forces the daemon gates off (host mode)
GATES_TABLE = {
    "": None,
    "IMEXDaemonsWithDNSNames=false": "cliques-need-dns",
    "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false": None,
    "IMEXDaemonsWithDNSNames=true,ComputeDomainCliques=true": None,
}
HOST_GATE = {False: "", True: "HostManagedIMEXDaemon=true"}


def expected_problems(mode: str, isolation: str, host_gate: bool, gates: str) -> set[str]:
    problems = {MODE_TABLE[mode][host_gate], ISOLATION_TABLE[isolation]}
    if mode != "hostManaged":
        problems.add(GATES_TABLE[gates])
    return problems - {None}


COMBINATIONS = list(itertools.product(MODE_TABLE, ISOLATION_TABLE, HOST_GATE, GATES_TABLE))


@pytest.mark.parametrize("mode,isolation,host_gate,gates", COMBINATIONS)
def test_validation_table(mode: str, isolation: str, host_gate: bool, gates: str) -> None:
    text = ",".join(part for part in (HOST_GATE[host_gate], gates) if part)
    expected = expected_problems(mode, isolation, host_gate, gates)
    if not expected:
        config = resolve_imex_config(mode, isolation, text)
        assert config.mode == mode
        assert config.isolation == "domain"
        assert config.host_managed is (mode == "hostManaged")
        assert not config.gates.violations()
        return
    with pytest.raises(ImexConfigError) as err:
        resolve_imex_config(mode, isolation, text)
    problems = err.value.problems
    assert len(problems) == len(expected), problems
    for code in expected:
        assert any(MESSAGES[code] in p for p in problems), (code, problems)
    assert str(err.value).startswith("imex configuration validation failed: ")


def test_host_mode_forces_daemon_gates_off_and_reports_overrides() -> None:
    config = resolve_imex_config(
        "hostManaged", "domain",
        "HostManagedIMEXDaemon=true,IMEXDaemonsWithDNSNames=true",
    )
    assert config.host_managed
    assert not config.gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES)
    assert not config.gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)
    assert config.gates.enabled(featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS)
    assert config.overridden == (featuregates.IMEX_DAEMONS_WITH_DNS_NAMES,)
    assert "IMEXDaemonsWithDNSNames=false," in config.gates.to_env()


def test_driver_mode_keeps_gates_as_given() -> None:
    gates = FeatureGates.parse("CrashOnNVLinkFabricErrors=false", validate=False)
    config = resolve_imex_config("driverManaged", "", gates)
    assert config.gates == gates
    assert config.gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)
    assert config.overridden == ()


def test_messages_name_the_flag_and_the_fix() -> None:
    with pytest.raises(ImexConfigError) as err:
        resolve_imex_config("hostManaged", "channel", "")
    message = str(err.value)
    assert "--imex-mode" in message and "HostManagedIMEXDaemon=true" in message
    assert "--imex-isolation" in message and "'domain'" in message


def test_unparsable_gate_string_is_a_feature_gate_error() -> None:
    with pytest.raises(FeatureGateError, match="unknown feature gate"):
        resolve_imex_config("driverManaged", "domain", "Nope=true")
