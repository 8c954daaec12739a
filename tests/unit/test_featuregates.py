"""Feature gates: defaults, parsing of FEATURE_GATES strings, dependency rules."""

from __future__ import annotations

import pytest

from cdriver import featuregates
from cdriver.featuregates import FeatureGateError, FeatureGates


def test_defaults_match_the_upstream_gate_table() -> None:
    gates = FeatureGates.parse("")
    assert gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES) is True
    assert gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES) is True
    assert gates.enabled(featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS) is True
    assert gates.enabled(featuregates.HOST_MANAGED_IMEX_DAEMON) is False
    assert featuregates.KNOWN_GATES[featuregates.HOST_MANAGED_IMEX_DAEMON].stage == featuregates.ALPHA
    assert gates.enabled(featuregates.DYNAMIC_MIG) is False


def test_parse_helm_style_string_with_trailing_comma_and_spaces() -> None:
    gates = FeatureGates.parse(" HostManagedIMEXDaemon=true , CrashOnNVLinkFabricErrors=false,,")
    assert gates.enabled(featuregates.HOST_MANAGED_IMEX_DAEMON)
    assert not gates.enabled(featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS)
    assert gates.explicit() == {
        featuregates.HOST_MANAGED_IMEX_DAEMON: True, featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS: False,
    }


@pytest.mark.parametrize("value,expected", [("1", True), ("t", True), ("TRUE", True),
                                            ("True", True), ("0", False), ("F", False),
                                            ("false", False)])
def test_bool_spellings(value: str, expected: bool) -> None:
    assert FeatureGates.parse(f"MPSSupport={value}").enabled(featuregates.MPS_SUPPORT) is expected


def test_later_entry_wins() -> None:
    gates = FeatureGates.parse("MPSSupport=true,MPSSupport=false")
    assert gates.enabled(featuregates.MPS_SUPPORT) is False


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
    assert featuregates.HOST_MANAGED_IMEX_DAEMON in str(err.value)


def test_cliques_require_dns_names() -> None:
    with pytest.raises(FeatureGateError) as err:
        FeatureGates.parse("IMEXDaemonsWithDNSNames=false")
    message = str(err.value)
    assert "ComputeDomainCliques requires IMEXDaemonsWithDNSNames" in message
    assert "ComputeDomainCliques=false" in message
    gates = FeatureGates.parse("IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false")
    assert not gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)


@pytest.mark.parametrize("pair", featuregates.MUTUALLY_EXCLUSIVE)
def test_mutually_exclusive_pairs(pair: tuple[str, str]) -> None:
    text = f"{pair[0]}=true,{pair[1]}=true"
    with pytest.raises(FeatureGateError, match="mutually exclusive"):
        FeatureGates.parse(text)


def test_device_metadata_requires_passthrough() -> None:
    with pytest.raises(FeatureGateError, match="DeviceMetadata requires PassthroughSupport"):
        FeatureGates.parse("DeviceMetadata=true")
    assert FeatureGates.parse("DeviceMetadata=true,PassthroughSupport=true").enabled(
        featuregates.DEVICE_METADATA)


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
    assert names == sorted(featuregates.KNOWN_GATES)
    assert FeatureGates.parse(env) == gates
    assert FeatureGates.parse(env).to_map() == gates.to_map()


def test_all_alpha_turns_on_unset_alpha_gates_only() -> None:
    gates = FeatureGates.parse("AllAlpha=true,MPSSupport=false,DynamicMIG=false,"
                               "PassthroughSupport=false,NVMLDeviceHealthCheck=false",
                               validate=False)
    assert gates.enabled(featuregates.HOST_MANAGED_IMEX_DAEMON)
    assert not gates.enabled(featuregates.MPS_SUPPORT)
    assert gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES)  # beta: untouched


def test_with_overrides_returns_a_new_set() -> None:
    base = FeatureGates.parse("")
    forced = base.with_overrides({featuregates.COMPUTE_DOMAIN_CLIQUES: False})
    assert base.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)
    assert not forced.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)
    with pytest.raises(FeatureGateError):
        base.with_overrides({"Bogus": True})


#: Every gate the upstream driver registers (its own gates plus the Kubernetes logging
#: gates and the AllAlpha/AllBeta meta gates of the gate registry).
UPSTREAM_GATES = (
    "TimeSlicingSettings", "MPSSupport", "IMEXDaemonsWithDNSNames", "PassthroughSupport",
    "NVMLDeviceHealthCheck", "DynamicMIG", "ComputeDomainCliques", "CrashOnNVLinkFabricErrors",
    "DeviceMetadata", "FabricManagerPartitioning", "HostManagedIMEXDaemon",
    "DRAListTypeAttributes", "ConsumableShares", "ContextualLogging", "LoggingAlphaOptions",
    "LoggingBetaOptions", "AllAlpha", "AllBeta",
)


@pytest.mark.parametrize("name", UPSTREAM_GATES)
def test_every_upstream_gate_name_is_accepted(name: str) -> None:
    gates = FeatureGates.parse(f"{name}=false", validate=False)
    assert gates.enabled(name) is False


def test_upstream_only_gates_parse_and_are_reported_as_without_effect() -> None:
    gates = FeatureGates.parse("DRAListTypeAttributes=true,ConsumableShares=true,"
                               "HostManagedIMEXDaemon=true")
    assert gates.enabled(featuregates.DRA_LIST_TYPE_ATTRIBUTES)
    assert gates.enabled(featuregates.CONSUMABLE_SHARES)
    assert gates.without_effect() == [featuregates.CONSUMABLE_SHARES, featuregates.DRA_LIST_TYPE_ATTRIBUTES]


def test_gates_cdriver_acts_on_are_not_reported_as_without_effect() -> None:
    for name in (featuregates.IMEX_DAEMONS_WITH_DNS_NAMES, featuregates.COMPUTE_DOMAIN_CLIQUES,
                 featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS, featuregates.HOST_MANAGED_IMEX_DAEMON,
                 featuregates.FABRIC_MANAGER_PARTITIONING):
        assert FeatureGates.parse(f"{name}=true").without_effect() == []


def test_a_gate_neither_driver_knows_names_itself_and_the_fix() -> None:
    with pytest.raises(FeatureGateError) as err:
        FeatureGates.parse("DRAListTypeAttribute=true")
    message = str(err.value)
    assert "'DRAListTypeAttribute'" in message
    assert "remove it from --feature-gates" in message
    assert featuregates.DRA_LIST_TYPE_ATTRIBUTES in message


def test_roles_log_each_accepted_gate_without_effect(caplog: pytest.LogCaptureFixture) -> None:
    from cdriver.roles.startup import resolve_imex

    with caplog.at_level("INFO", logger="cdriver.roles.startup"):
        imex = resolve_imex("driverManaged", "", "ConsumableShares=true,MPSSupport=false")
    assert imex.gates.enabled(featuregates.CONSUMABLE_SHARES)
    lines = [r.getMessage() for r in caplog.records if "has no effect in cdriver" in r.getMessage()]
    assert len(lines) == 2
    assert any("ConsumableShares" in line for line in lines)
    assert any("MPSSupport" in line for line in lines)
