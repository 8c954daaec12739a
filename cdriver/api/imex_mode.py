"""IMEX lifecycle mode and isolation settings, validated together with the feature gates.

Shared by the controller and the kubelet plugin. In host-managed mode the daemon-related
gates (DNS names, cliques) do not apply: they are forced off *before* the dependency rules
are checked, so only the effective gate set is validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdriver import featuregates
from cdriver.errors import CdriverError

IMEX_MODE_DRIVER_MANAGED = "driverManaged"
IMEX_MODE_HOST_MANAGED = "hostManaged"
IMEX_ISOLATION_DOMAIN = "domain"
IMEX_ISOLATION_CHANNEL = "channel"
ENV_IMEX_MODE = "IMEX_MODE"
ENV_IMEX_ISOLATION = "IMEX_ISOLATION"

MODES = (IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED)
ISOLATIONS = (IMEX_ISOLATION_DOMAIN, IMEX_ISOLATION_CHANNEL)
DEFAULT_MODE = IMEX_MODE_DRIVER_MANAGED
DEFAULT_ISOLATION = IMEX_ISOLATION_DOMAIN

#: Gates that mean nothing without driver-run daemons; forced off in host-managed mode.
HOST_MANAGED_FORCED_OFF = (featuregates.IMEX_DAEMONS_WITH_DNS_NAMES, featuregates.COMPUTE_DOMAIN_CLIQUES)


class ImexConfigError(CdriverError):
    """The mode/isolation/gate combination is invalid; ``problems`` lists each issue."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("imex configuration validation failed: " + "; ".join(problems))


@dataclass(frozen=True)
class ImexConfig:
    """Validated settings. ``gates`` is the effective gate set the role must use."""

    mode: str
    isolation: str
    gates: featuregates.FeatureGates
    #: Gates the user set explicitly that the mode overrode (worth a log line).
    overridden: tuple[str, ...] = field(default=())

    @property
    def host_managed(self) -> bool:
        return self.mode == IMEX_MODE_HOST_MANAGED


def mode_problem(mode: str, host_gate_enabled: bool) -> str | None:
    """Why ``mode`` is unusable with the HostManagedIMEXDaemon gate as given, or None."""
    if mode == IMEX_MODE_DRIVER_MANAGED:
        return None
    if mode == IMEX_MODE_HOST_MANAGED:
        if host_gate_enabled:
            return None
        return (
            f"imex mode {IMEX_MODE_HOST_MANAGED!r} (--imex-mode / IMEX_MODE) needs the "
            f"{featuregates.HOST_MANAGED_IMEX_DAEMON} feature gate (alpha, off by default): add "
            f"{featuregates.HOST_MANAGED_IMEX_DAEMON}=true to --feature-gates / FEATURE_GATES, or use "
            f"--imex-mode={IMEX_MODE_DRIVER_MANAGED}"
        )
    return (
        f"unknown imex mode {mode!r} (--imex-mode / IMEX_MODE): use "
        f"{IMEX_MODE_DRIVER_MANAGED!r} (default) or {IMEX_MODE_HOST_MANAGED!r}"
    )


def isolation_problem(isolation: str) -> str | None:
    """Why ``isolation`` is unusable, or None (empty means the default, ``domain``)."""
    if isolation in ("", IMEX_ISOLATION_DOMAIN):
        return None
    if isolation == IMEX_ISOLATION_CHANNEL:
        return (
            f"imex isolation {IMEX_ISOLATION_CHANNEL!r} (--imex-isolation / IMEX_ISOLATION) "
            "is not supported yet: per-workload channel allocation is not implemented; use "
            f"{IMEX_ISOLATION_DOMAIN!r}"
        )
    return (
        f"unknown imex isolation {isolation!r} (--imex-isolation / IMEX_ISOLATION): use "
        f"{IMEX_ISOLATION_DOMAIN!r} (default); {IMEX_ISOLATION_CHANNEL!r} is reserved"
    )


def effective_gates(mode: str, gates: featuregates.FeatureGates) -> tuple[featuregates.FeatureGates, tuple[str, ...]]:
    """Gates as the role will use them in ``mode``, plus explicit settings that were overridden."""
    if mode != IMEX_MODE_HOST_MANAGED:
        return gates, ()
    explicit = gates.explicit()
    overridden = tuple(name for name in HOST_MANAGED_FORCED_OFF if explicit.get(name) is True)
    return gates.with_overrides({name: False for name in HOST_MANAGED_FORCED_OFF}), overridden


def resolve_imex_config(
    mode: str, isolation: str, gates: featuregates.FeatureGates | str | None
) -> ImexConfig:
    """Validate mode, isolation and the effective gates together.

    ``gates`` is a `FeatureGates` (parsed with ``validate=False``) or the raw
    ``--feature-gates`` text. Raises `ImexConfigError` listing every problem (each with
    its fix) or `FeatureGateError` for an unparsable gate string.
    """
    if not isinstance(gates, featuregates.FeatureGates):
        gates = featuregates.FeatureGates.parse(gates or "", validate=False)
    problems = []
    problem = mode_problem(mode, gates.enabled(featuregates.HOST_MANAGED_IMEX_DAEMON))
    if problem:
        problems.append(problem)
    problem = isolation_problem(isolation)
    if problem:
        problems.append(problem)
    effective, overridden = effective_gates(mode, gates)
    problems.extend(effective.violations())
    if problems:
        raise ImexConfigError(problems)
    return ImexConfig(
        mode=mode, isolation=isolation or DEFAULT_ISOLATION, gates=effective,
        overridden=overridden,
    )
