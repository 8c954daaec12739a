"""The nvidia-imex settings operators tune (chart values `imex.daemonConfig.*`).

Each tunable key has upstream's default, the values nvidia-imex accepts, a chart value name,
a kubelet plugin flag and its environment variable, and a template variable of the packaged
IMEX config template. The kubelet plugin fills them into the template it places in every
domain directory, so each daemon (cdriver's or, during a switch, upstream's) writes them
into the config its nvidia-imex reads. Pure: parsing and checking only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cdriver.errors import CdriverError

#: Largest number of seconds the grace time takes (nvidia-imex reads a signed 32-bit integer).
MAX_SECONDS = 2**31 - 1


class ImexSettingError(CdriverError):
    """A tunable IMEX setting with a value nvidia-imex does not accept (names key, range, default)."""


@dataclass(frozen=True)
class Tunable:
    """One nvidia-imex config key that operators may set."""

    key: str  #: the nvidia-imex config key
    value_name: str  #: the chart value under `imex.daemonConfig`
    flag: str  #: the kubelet plugin's option
    env: str  #: the option's environment variable (the chart sets it)
    default: str  #: upstream's value (its daemon config template)
    allowed: str  #: the accepted values, in words
    minimum: int | None = None  #: integer keys: the smallest value
    maximum: int | None = None  #: integer keys: the largest value
    choices: tuple[str, ...] = ()  #: word keys: the accepted words

    @property
    def variable(self) -> str:
        """Name of the template variable (jinja2) that stands for the value."""
        return "".join("_" + ch.lower() if ch.isupper() else ch for ch in self.value_name)

    def normalize(self, raw: object) -> str | None:
        """The value as written into the config, or None when nvidia-imex would not accept it."""
        text = str(raw).strip() if not isinstance(raw, bool) else ""
        if self.choices:
            return text if text in self.choices else None
        try:
            number = int(text, 10)
        except ValueError:
            return None
        if self.minimum is not None and number < self.minimum:
            return None
        if self.maximum is not None and number > self.maximum:
            return None
        return str(number)

    @property
    def option(self) -> str:
        """The kubelet plugin's option and its environment variable, for messages."""
        return f"{self.flag} (env {self.env})"

    def problem(self, raw: object, name: str) -> str:
        """The message for an unusable `raw` given as `name` (a flag, variable or key)."""
        return f"{name}={raw!r} is not valid for {self.key}: use {self.allowed} (default {self.default})"


TUNABLES: tuple[Tunable, ...] = (
    Tunable(
        key="IMEX_NODE_DISCONNECTED_GRACE_TIME", value_name="nodeDisconnectedGraceTime",
        flag="--imex-node-disconnected-grace-time", env="IMEX_NODE_DISCONNECTED_GRACE_TIME", default="-1",
        allowed=f"-1 (wait indefinitely), 0 (clean up at once) or seconds from 1 to {MAX_SECONDS}",
        minimum=-1, maximum=MAX_SECONDS),
    Tunable(
        key="LOG_LEVEL", value_name="logLevel", flag="--imex-log-level", env="IMEX_LOG_LEVEL", default="4",
        allowed="an integer from 0 (logging off) to 4 (INFO and above)", minimum=0, maximum=4),
    Tunable(
        key="IMEX_WAIT_FOR_QUORUM", value_name="waitForQuorum", flag="--imex-wait-for-quorum",
        env="IMEX_WAIT_FOR_QUORUM", default="RECOVERY",
        allowed="RECOVERY (after an unsafe stop, wait for the nodes that had imported) or NONE",
        choices=("RECOVERY", "NONE")),
)
BY_KEY: dict[str, Tunable] = {t.key: t for t in TUNABLES}


def _defaults() -> dict[str, str]:
    return {t.key: t.default for t in TUNABLES}


@dataclass(frozen=True)
class ImexSettings:
    """The value of every tunable key (upstream's default where none was given)."""

    values: Mapping[str, str] = field(default_factory=_defaults)

    @classmethod
    def parse(cls, given: Mapping[str, object | None],
              name_of: Callable[[Tunable], str] = lambda t: t.key) -> ImexSettings:
        """Settings from `given` (tunable key -> raw value; None or missing: the default).

        Raises ImexSettingError naming the setting (as `name_of` calls it), the values it
        accepts and its default.
        """
        values = _defaults()
        for tunable in TUNABLES:
            raw = given.get(tunable.key)
            if raw is None:
                continue
            value = tunable.normalize(raw)
            if value is None:
                raise ImexSettingError(tunable.problem(raw, name_of(tunable)))
            values[tunable.key] = value
        return cls(values)

    def variables(self) -> dict[str, str]:
        """Template variable -> value, for rendering the IMEX config template."""
        return {t.variable: self.values[t.key] for t in TUNABLES}

    def changed(self) -> dict[str, str]:
        """Keys set to something other than upstream's default."""
        return {t.key: self.values[t.key] for t in TUNABLES if self.values[t.key] != t.default}

    def describe(self) -> str:
        """One line for logs: KEY=value of every tunable key."""
        return describe_config(self.values)


DEFAULT_SETTINGS = ImexSettings()


def describe_config(config_values: Mapping[str, str]) -> str:
    """KEY=value of every tunable key of a parsed config, for logs ("(unset)" where missing)."""
    return ", ".join(f"{t.key}={config_values.get(t.key, '(unset)')}" for t in TUNABLES)


def config_problems(config_values: Mapping[str, str], source: str) -> list[str]:
    """Tunable keys of a parsed IMEX config whose value nvidia-imex would not accept."""
    out = []
    for key, raw in config_values.items():
        tunable = BY_KEY.get(key)
        if tunable is not None and tunable.normalize(raw) is None:
            out.append(f"{source}: {tunable.problem(raw, key)}")
    return out


def mismatches(config_values: Mapping[str, str], settings: ImexSettings, source: str) -> list[str]:
    """Tunable keys a rendered config does not carry as `settings` ask (a template that
    hard-codes one, or leaves out one set to other than its default)."""
    out = []
    for tunable in TUNABLES:
        want = settings.values[tunable.key]
        have = config_values.get(tunable.key)
        if have is None and want == tunable.default:
            continue
        if have is None or tunable.normalize(have) != want:
            out.append(
                f"{source}: {tunable.key} is {have!r} but the driver is set to {want!r} ({tunable.flag}); "
                f"write {tunable.key}={{{{ {tunable.variable} }}}} in the template")
    return out


#: nvidia-imex's LOG_LEVEL -> the lowest Python logging level it lets through (0: nothing).
LOG_LEVEL_THRESHOLDS: dict[int, int] = {0: 100, 1: 50, 2: 40, 3: 30, 4: 20}


def log_threshold(config_values: Mapping[str, str]) -> int:
    """The Python logging level an IMEX config's LOG_LEVEL asks for (INFO when unset or invalid)."""
    value = BY_KEY["LOG_LEVEL"].normalize(config_values.get("LOG_LEVEL", "4"))
    return LOG_LEVEL_THRESHOLDS[int(value if value is not None else "4")]
