"""Do a domain's IMEX daemons run with the controller's feature gates? (pure)

The gates ``ComputeDomainCliques`` and ``IMEXDaemonsWithDNSNames`` decide where a daemon
registers (a ComputeDomainClique, or the ComputeDomain's ``status.nodes``) and how it names its
peers; the kubelet plugins and the controller follow the chart's gates. A DaemonSet created
before the gates changed keeps the old ``FEATURE_GATES`` in its pod template, so its daemons
would register where nobody looks any more. The controller therefore rewrites that value
(every daemon pod of the domain restarts once, all at once: ``maxUnavailable: 100%``).

During a rolling upgrade of the controller an older one may still lead for a moment; each
rewrite is stamped with the writer's start time and a controller never overrides a stamp
newer than its own start, so the newest controller's gates win.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass

from cdriver import featuregates
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.kube.objects import meta_of

#: Gates whose value changes what a running daemon does with its domain.
DAEMON_GATES = (featuregates.COMPUTE_DOMAIN_CLIQUES, featuregates.IMEX_DAEMONS_WITH_DNS_NAMES)
#: Start time of the controller that last set the daemons' gates (RFC 3339, microseconds).
ANNOTATION_GATES_SET_AT = "cdriver/daemon-gates-set-at"
#: Replace every daemon pod at once: a domain whose daemons straddle two registration paths
#: (some in cliques, some in status.nodes) never becomes Ready, so one node at a time would
#: keep it NotReady for the whole roll-out.
UPDATE_STRATEGY = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
EVENT_FOLLOW_GATES = "IMEXDaemonsFollowFeatureGates"

_TRUE = {"1", "t", "T", "true", "TRUE", "True"}


def start_stamp(now: dt.datetime | None = None) -> str:
    """The stamp of a controller started at ``now`` (default: this moment)."""
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_stamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _containers(ds: dict) -> list[dict]:
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [c for c in spec.get("containers") or [] if isinstance(c, dict)]


def daemon_container(ds: dict, name: str) -> dict | None:
    """The daemon container of a DaemonSet: the one named ``name``, else the only one."""
    containers = _containers(ds)
    named = next((c for c in containers if c.get("name") == name), None)
    if named is not None:
        return named
    return containers[0] if len(containers) == 1 else None


def gates_env(container: dict | None) -> str:
    """The container's literal FEATURE_GATES value ("" when unset: every gate at its default)."""
    for env in (container or {}).get("env") or []:
        if isinstance(env, dict) and env.get("name") == ENV_FEATURE_GATES:
            return str(env.get("value") or "")
    return ""


def gate_values(env: str) -> dict[str, bool]:
    """The daemon gates as a daemon reading ``env`` sees them; names a daemon of another
    version might know and this one does not are skipped, not an error."""
    values = {name: featuregates.KNOWN_GATES[name].default for name in DAEMON_GATES}
    for segment in env.split(","):
        name, sep, value = segment.partition("=")
        if sep and name.strip() in values:
            values[name.strip()] = value.strip() in _TRUE
    return values


def differing(current_env: str, wanted_env: str) -> dict[str, tuple[bool, bool]]:
    """Daemon gates that differ: name -> (what the daemons run with, what they should)."""
    have, want = gate_values(current_env), gate_values(wanted_env)
    return {name: (have[name], want[name]) for name in DAEMON_GATES if have[name] != want[name]}


def describe(changes: dict[str, tuple[bool, bool]]) -> str:
    """``ComputeDomainCliques false -> true, ...``."""
    return ", ".join(f"{name} {str(old).lower()} -> {str(new).lower()}"
                     for name, (old, new) in sorted(changes.items()))


@dataclass(frozen=True)
class GateDecision:
    """What to do about one DaemonSet's gates."""

    #: daemon gates that differ (empty: nothing to do)
    changes: dict[str, tuple[bool, bool]]
    #: a newer controller set them (its stamp): leave them alone
    newer_stamp: str = ""

    @property
    def update(self) -> bool:
        return bool(self.changes) and not self.newer_stamp


def decide(ds: dict, container_name: str, wanted_env: str, own_stamp: str) -> GateDecision:
    """Compare a DaemonSet's daemon gates with the controller's (``wanted_env``, its
    FEATURE_GATES) and say whether this controller, started at ``own_stamp``, may rewrite them."""
    changes = differing(gates_env(daemon_container(ds, container_name)), wanted_env)
    if not changes:
        return GateDecision({})
    theirs = str((meta_of(ds).get("annotations") or {}).get(ANNOTATION_GATES_SET_AT) or "")
    their_time, own_time = _parse_stamp(theirs), _parse_stamp(own_stamp)
    if their_time is not None and (own_time is None or their_time > own_time):
        return GateDecision(changes, newer_stamp=theirs)
    return GateDecision(changes)


def with_gates(ds: dict, container_name: str, wanted_env: str, own_stamp: str) -> dict:
    """The full DaemonSet ``ds`` with the daemon container's FEATURE_GATES set to
    ``wanted_env``, the all-at-once update strategy and this controller's stamp; its
    resourceVersion stays (the update is guarded)."""
    out = copy.deepcopy(ds)
    container = daemon_container(out, container_name)
    if container is None:
        raise ValueError(f"DaemonSet {meta_of(ds).get('name')} has no container {container_name!r}")
    env = [e for e in container.get("env") or [] if not (isinstance(e, dict) and e.get("name") == ENV_FEATURE_GATES)]
    container["env"] = [*env, {"name": ENV_FEATURE_GATES, "value": wanted_env}]
    out.setdefault("spec", {})["updateStrategy"] = copy.deepcopy(UPDATE_STRATEGY)
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_GATES_SET_AT: own_stamp}
    return out


def summary(ds: dict, container_name: str) -> tuple[dict, dict]:
    """(annotations, spec) of ``ds`` that `decide` reads: the stamp and the daemon container's
    FEATURE_GATES, for a cache that keeps no pod template."""
    annotations: dict = {}
    stamp = (meta_of(ds).get("annotations") or {}).get(ANNOTATION_GATES_SET_AT)
    if stamp is not None:
        annotations[ANNOTATION_GATES_SET_AT] = stamp
    container = daemon_container(ds, container_name)
    if container is None:
        return annotations, {}
    env = [e for e in container.get("env") or [] if isinstance(e, dict) and e.get("name") == ENV_FEATURE_GATES]
    return annotations, {"template": {"spec": {"containers": [{"name": container.get("name"), "env": env}]}}}
