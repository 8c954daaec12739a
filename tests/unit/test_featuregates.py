"""Feature gates: defaults, parsing of FEATURE_GATES strings, dependency rules."""

from __future__ import annotations

import pytest

from cdriver import featuregates as fg
from cdriver.featuregates import FeatureGateError, FeatureGates

pytestmark = pytest.mark.unit


def test_defaults_match_the_upstream_gate_table() -> None:
    gates = FeatureGates.parse("")
    assert gates.enabled(fg.IMEX_DAEMONS_WITH_DNS_NAMES) is True
    assert gates.enabled(fg.COMPUTE_DOMAIN_CLIQUES) is True
    assert gates.enabled(fg.CRASH_ON_NVLINK_FABRIC_ERRORS) is True
    assert gates.enabled(fg.HOST_MANAGED_IMEX_DAEMON) is False
    assert fg.KNOWN_GATES[fg.HOST_MANAGED_IMEX_DAEMON].stage == fg.ALPHA
    assert gates.enabled(fg.DYNAMIC_MIG) is False


def test_parse_helm_style_string_with_trailing_comma_and_spaces() -> None:
    gates = FeatureGates.parse(" HostManagedIMEXDaemon=true , CrashOnNVLinkFabricErrors=false,,")
    assert gates.enabled(fg.HOST_MANAGED_IMEX_DAEMON)
    assert not gates.enabled(fg.CRASH_ON_NVLINK_FABRIC_ERRORS)
    assert gates.explicit() == {
        fg.HOST_MANAGED_IMEX_DAEMON: True, fg.CRASH_ON_NVLINK_FABRIC_ERRORS: False,
    }


@pytest.mark.parametrize("value,expected", [("1", True), ("t", True), ("TRUE", True),
                                            ("True", True), ("0", False), ("F", False),
                                            ("false", False)])
def test_bool_spellings(value: str, expected: bool) -> None:
    assert FeatureGates.parse(f"MPSSupport={value}").enabled(fg.MPS_SUPPORT) is expected


def test_later_entry_wins() -> None:
    gates = FeatureGates.parse("MPSSupport=true,MPSSupport=false")
    assert gates.enabled(fg.MPS_SUPPORT) is False


@pytest.mark.parametrize("text,fragment", [
    ("NoSuchGate=true", "unknown feature gate 'NoSuchGate'"),
    ("MPSSupport=maybe", "value must be true or false"),
    ("MPSSupport", "has no value"),
    ("MPSSupport=", "value must be true or false"),
])
def test_bad_strings_are_rejected_with_a_fix(text: str, fragment: str) -> None:
    with pytest.raises(FeatureGateError) as err:
        FeatureGates.parse(text)
    assert fragment in str(err.value)


def test_unknown_gate_error_lists_known_gates() -> None:
    with pytest.raises(FeatureGateError) as err:
        FeatureGates.parse("HostManagedImexDaemon=true")
    assert fg.HOST_MANAGED_IMEX_DAEMON in str(err.value)


def test_cliques_require_dns_names() -> None:
    with pytest.raises(FeatureGateError) as err:
        FeatureGates.parse("IMEXDaemonsWithDNSNames=false")
    message = str(err.value)
    assert "ComputeDomainCliques requires IMEXDaemonsWithDNSNames" in message
    assert "ComputeDomainCliques=false" in message
    gates = FeatureGates.parse("IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false")
    assert not gates.enabled(fg.COMPUTE_DOMAIN_CLIQUES)


@pytest.mark.parametrize("pair", fg.MUTUALLY_EXCLUSIVE)
def test_mutually_exclusive_pairs(pair: tuple[str, str]) -> None:
    text = f"{pair[0]}=true,{pair[1]}=true"
    with pytest.raises(FeatureGateError, match="mutually exclusive"):
        FeatureGates.parse(text)


def test_device_metadata_requires_passthrough() -> None:
    with pytest.raises(FeatureGateError, match="DeviceMetadata requires PassthroughSupport"):
        FeatureGates.parse("DeviceMetadata=true")
    assert FeatureGates.parse("DeviceMetadata=true,PassthroughSupport=true").enabled(
        fg.DEVICE_METADATA)


def test_validate_false_defers_dependency_rules() -> None:
    gates = FeatureGates.parse("IMEXDaemonsWithDNSNames=false", validate=False)
    assert gates.violations()
    with pytest.raises(FeatureGateError):
        gates.validate()


def test_to_env_round_trips_every_known_gate() -> None:
    gates = FeatureGates.parse("HostManagedIMEXDaemon=true,CrashOnNVLinkFabricErrors=false")
    env = gates.to_env()
    assert env.endswith(",")
    names = [part.split("=")[0] for part in env.rstrip(",").split(",")]
    assert names == sorted(fg.KNOWN_GATES)
    assert FeatureGates.parse(env) == gates
    assert FeatureGates.parse(env).to_map() == gates.to_map()


def test_all_alpha_turns_on_unset_alpha_gates_only() -> None:
    gates = FeatureGates.parse("AllAlpha=true,MPSSupport=false,DynamicMIG=false,"
                               "PassthroughSupport=false,NVMLDeviceHealthCheck=false",
                               validate=False)
    assert gates.enabled(fg.HOST_MANAGED_IMEX_DAEMON)
    assert not gates.enabled(fg.MPS_SUPPORT)
    assert gates.enabled(fg.IMEX_DAEMONS_WITH_DNS_NAMES)  # beta: untouched


def test_with_overrides_returns_a_new_set() -> None:
    base = FeatureGates.parse("")
    forced = base.with_overrides({fg.COMPUTE_DOMAIN_CLIQUES: False})
    assert base.enabled(fg.COMPUTE_DOMAIN_CLIQUES)
    assert not forced.enabled(fg.COMPUTE_DOMAIN_CLIQUES)
    with pytest.raises(FeatureGateError):
        base.with_overrides({"Bogus": True})
