"""Feature gates: names, defaults, stages, ``K=v,...`` parsing and dependency rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdriver.errors import CdriverError

ENV_FEATURE_GATES = "FEATURE_GATES"

# --- ComputeDomain gates ---------------------------------------------------------------
IMEX_DAEMONS_WITH_DNS_NAMES = "IMEXDaemonsWithDNSNames"
COMPUTE_DOMAIN_CLIQUES = "ComputeDomainCliques"
CRASH_ON_NVLINK_FABRIC_ERRORS = "CrashOnNVLinkFabricErrors"
HOST_MANAGED_IMEX_DAEMON = "HostManagedIMEXDaemon"
FABRIC_MANAGER_PARTITIONING = "FabricManagerPartitioning"
#: cdriver's own: channel devices carry binding conditions (pods wait in scheduling, not in
#: ContainerCreating, until their node's IMEX daemon is Ready; Kubernetes 1.36+).
COMPUTE_DOMAIN_BINDING_CONDITIONS = "ComputeDomainBindingConditions"
# --- GPU-side gates (known so shared FEATURE_GATES strings parse; unused here) -------
TIME_SLICING_SETTINGS = "TimeSlicingSettings"
MPS_SUPPORT = "MPSSupport"
PASSTHROUGH_SUPPORT = "PassthroughSupport"
DYNAMIC_MIG = "DynamicMIG"
NVML_DEVICE_HEALTH_CHECK = "NVMLDeviceHealthCheck"
DEVICE_METADATA = "DeviceMetadata"
DRA_LIST_TYPE_ATTRIBUTES = "DRAListTypeAttributes"
CONSUMABLE_SHARES = "ConsumableShares"
# --- Generic gates of the Kubernetes gate registry ----------------------------------------
CONTEXTUAL_LOGGING = "ContextualLogging"
LOGGING_ALPHA_OPTIONS = "LoggingAlphaOptions"
LOGGING_BETA_OPTIONS = "LoggingBetaOptions"
ALL_ALPHA = "AllAlpha"
ALL_BETA = "AllBeta"

ALPHA = "Alpha"
BETA = "Beta"


@dataclass(frozen=True)
class GateSpec:
    """A known gate: its default value and maturity stage."""

    name: str
    default: bool
    stage: str


KNOWN_GATES: dict[str, GateSpec] = {
    g.name: g
    for g in (
        GateSpec(IMEX_DAEMONS_WITH_DNS_NAMES, True, BETA),
        GateSpec(COMPUTE_DOMAIN_CLIQUES, True, BETA),
        GateSpec(CRASH_ON_NVLINK_FABRIC_ERRORS, True, BETA),
        GateSpec(HOST_MANAGED_IMEX_DAEMON, False, ALPHA),
        GateSpec(FABRIC_MANAGER_PARTITIONING, False, ALPHA),
        GateSpec(COMPUTE_DOMAIN_BINDING_CONDITIONS, False, ALPHA),
        GateSpec(TIME_SLICING_SETTINGS, False, ALPHA),
        GateSpec(MPS_SUPPORT, False, ALPHA),
        GateSpec(PASSTHROUGH_SUPPORT, False, ALPHA),
        GateSpec(DYNAMIC_MIG, False, ALPHA),
        GateSpec(NVML_DEVICE_HEALTH_CHECK, False, ALPHA),
        GateSpec(DEVICE_METADATA, False, ALPHA),
        GateSpec(DRA_LIST_TYPE_ATTRIBUTES, False, ALPHA),
        GateSpec(CONSUMABLE_SHARES, False, ALPHA),
        GateSpec(CONTEXTUAL_LOGGING, True, BETA),
        GateSpec(LOGGING_ALPHA_OPTIONS, False, ALPHA),
        GateSpec(LOGGING_BETA_OPTIONS, True, BETA),
        GateSpec(ALL_ALPHA, False, ALPHA),
        GateSpec(ALL_BETA, False, BETA),
    )
}

#: Gates accepted so that a ``featureGates`` map shared with the GPU driver (or written
#: for the upstream ComputeDomain driver) parses, but that change nothing in cdriver.
WITHOUT_EFFECT: frozenset[str] = frozenset({
    TIME_SLICING_SETTINGS, MPS_SUPPORT, PASSTHROUGH_SUPPORT, DYNAMIC_MIG,
    NVML_DEVICE_HEALTH_CHECK, DEVICE_METADATA, DRA_LIST_TYPE_ATTRIBUTES, CONSUMABLE_SHARES,
    LOGGING_ALPHA_OPTIONS, LOGGING_BETA_OPTIONS, CONTEXTUAL_LOGGING,
})

#: (gate, required gate): the first may only be on when the second is on too.
REQUIRES: tuple[tuple[str, str], ...] = (
    (COMPUTE_DOMAIN_CLIQUES, IMEX_DAEMONS_WITH_DNS_NAMES),
    (DEVICE_METADATA, PASSTHROUGH_SUPPORT),
)
#: Pairs that may not both be on.
MUTUALLY_EXCLUSIVE: tuple[tuple[str, str], ...] = (
    (DYNAMIC_MIG, PASSTHROUGH_SUPPORT),
    (DYNAMIC_MIG, NVML_DEVICE_HEALTH_CHECK),
    (DYNAMIC_MIG, MPS_SUPPORT),
    (PASSTHROUGH_SUPPORT, NVML_DEVICE_HEALTH_CHECK),
)

_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}
_META = (ALL_ALPHA, ALL_BETA)


class FeatureGateError(CdriverError):
    """A feature-gate string or combination is invalid."""


def _parse_bool(name: str, value: str) -> bool:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise FeatureGateError(
        f"feature gate {name}={value!r}: value must be true or false "
        f"(e.g. --feature-gates {name}=true)"
    )


def _check_name(name: str) -> None:
    if name not in KNOWN_GATES:
        known = ", ".join(sorted(KNOWN_GATES))
        raise FeatureGateError(
            f"unknown feature gate {name!r}: neither cdriver nor the upstream NVIDIA DRA driver "
            f"knows it; remove it from --feature-gates / FEATURE_GATES (known gates: {known})"
        )


class FeatureGates:
    """An immutable set of explicit gate settings over the defaults."""

    def __init__(self, explicit: Mapping[str, bool] | None = None) -> None:
        for name in explicit or {}:
            _check_name(name)
        self._explicit: dict[str, bool] = dict(explicit or {})

    # -- construction ----------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | None, validate: bool = True) -> FeatureGates:
        """Parse ``"K=v,K=v,"`` (empty segments and spaces ignored; later entries win).

        With ``validate`` the dependency rules are checked too; pass False when the
        caller still has to apply mode-dependent overrides (see `cdriver.api.imex_mode`).
        """
        explicit: dict[str, bool] = {}
        for segment in (text or "").split(","):
            segment = segment.strip()
            if not segment:
                continue
            if "=" not in segment:
                raise FeatureGateError(
                    f"feature gate entry {segment!r} has no value; "
                    f"write {segment}=true or {segment}=false"
                )
            name, value = (part.strip() for part in segment.split("=", 1))
            _check_name(name)
            explicit[name] = _parse_bool(name, value)
        gates = cls(explicit)
        if validate:
            gates.validate()
        return gates

    @classmethod
    def defaults(cls) -> FeatureGates:
        return cls()

    def with_overrides(self, overrides: Mapping[str, bool]) -> FeatureGates:
        """A copy with ``overrides`` set explicitly (not validated)."""
        merged = dict(self._explicit)
        merged.update(overrides)
        return FeatureGates(merged)

    # -- queries ---------------------------------------------------------------------
    def enabled(self, name: str) -> bool:
        _check_name(name)
        if name in self._explicit:
            return self._explicit[name]
        spec = KNOWN_GATES[name]
        if name not in _META:
            if spec.stage == ALPHA and self._explicit.get(ALL_ALPHA):
                return True
            if spec.stage == BETA and self._explicit.get(ALL_BETA):
                return True
        return spec.default

    def explicit(self) -> dict[str, bool]:
        """Only the gates that were set (not defaulted)."""
        return dict(self._explicit)

    def to_map(self) -> dict[str, bool]:
        """Effective value of every known gate."""
        return {name: self.enabled(name) for name in sorted(KNOWN_GATES)}

    def to_env(self) -> str:
        """``"K=v,K=v,"`` of every known gate, sorted: what a child process inherits."""
        return "".join(
            f"{name}={'true' if value else 'false'}," for name, value in self.to_map().items()
        )

    def without_effect(self) -> list[str]:
        """Explicitly set gates that cdriver accepts but does not act on, sorted."""
        return sorted(name for name in self._explicit if name in WITHOUT_EFFECT)

    def violations(self) -> list[str]:
        """Every broken dependency/exclusivity rule, as an actionable sentence."""
        problems = []
        for gate, required in REQUIRES:
            if self.enabled(gate) and not self.enabled(required):
                problems.append(
                    f"feature gate {gate} requires {required} to also be enabled; "
                    f"set {required}=true or {gate}=false"
                )
        for first, second in MUTUALLY_EXCLUSIVE:
            if self.enabled(first) and self.enabled(second):
                problems.append(
                    f"feature gates {first} and {second} are mutually exclusive; "
                    f"disable one of them"
                )
        return problems

    def validate(self) -> FeatureGates:
        """Raise `FeatureGateError` listing every broken rule; return self if none."""
        problems = self.violations()
        if problems:
            raise FeatureGateError("feature gate validation failed: " + "; ".join(problems))
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureGates) and self.to_map() == other.to_map()

    def __hash__(self) -> int:
        return hash(tuple(self.to_map().items()))

    def __repr__(self) -> str:
        return f"FeatureGates({self._explicit!r})"
