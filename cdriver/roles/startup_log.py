"""Each role's start-up configuration, logged once at every verbosity (logVerbosity 0 too):
its settings as given or defaulted, the effective feature gates, the versions. Building and
formatting the line is pure; `log_startup_configuration` writes it."""

from __future__ import annotations

import logging
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from cdriver import KUBERNETES_VERSION, __version__
from cdriver.featuregates import FeatureGates

log = logging.getLogger(__name__)


def _plain(value: object) -> object:
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


@dataclass(frozen=True)
class StartupConfiguration:
    """What a role starts with."""

    role: str
    versions: Mapping[str, str]
    gates: Mapping[str, bool]
    settings: Mapping[str, object]

    def line(self) -> str:
        """The configuration as one log line."""
        versions = self.versions
        return (f"start-up configuration of {self.role}: cdriver {versions['cdriver']} (python "
                f"{versions['python']}, Kubernetes API {versions['kubernetes']}); feature gates: "
                + ",".join(f"{name}={str(on).lower()}" for name, on in self.gates.items())
                + "; settings: " + ", ".join(f"{key}={value!r}" for key, value in self.settings.items()))


def startup_configuration(role: str, settings: Mapping[str, object], gates: FeatureGates | None,
                          root: Mapping[str, object]) -> StartupConfiguration:
    """The role's settings (sorted; the raw gate text left out, the effective gates given
    instead), the shared options of the `cdriver` group (`root`: verbosity, log format), the
    versions."""
    merged = {"log_verbosity": root.get("verbosity", 0), "log_format": root.get("log_format", "text"),
              **settings}
    return StartupConfiguration(
        role=role,
        versions={"cdriver": __version__, "python": platform.python_version(), "kubernetes": KUBERNETES_VERSION},
        gates=(gates or FeatureGates()).to_map(),
        settings={key: _plain(merged[key]) for key in sorted(merged) if key != "feature_gates"},
    )


def log_startup_configuration(role: str, settings: Mapping[str, object], gates: FeatureGates | None,
                              root: Mapping[str, object]) -> None:
    """Log the role's start-up configuration once (INFO: shown at every verbosity)."""
    log.info("%s", startup_configuration(role, settings, gates, root).line())
