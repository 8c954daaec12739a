"""A kubelet-plugin update under load on a simulated cluster, and its evidence.

`WorkloadStream` creates and deletes workload pods on one node, one after another, checking the
channel inside each container when it starts and again a second later; `upgrade_plugin` runs
`helm upgrade` with a changed image tag (and the values given) and waits until every node runs a
Ready plugin pod of that tag; `node_evidence` reads from a simulated node's log what a user would
count: the DRA calls made for given claims (failed ones, how often each claim was unprepared) and
the times the node had no usable plugin instance. Used by the e2e test and `bench/plugin_update.py`.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdriver.api import constants
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.node.simulated.call_log import DraCall, read_calls
from cdriver.sim.world import scenario

PLUGIN_LABELS = "app.kubernetes.io/component=kubelet-plugin"
_DRIVER = re.escape(constants.DRIVER_NAME)
_REGISTERED = re.compile(rf"registered DRA plugin {_DRIVER} \(service \S+, endpoint (\S+)\)")
_UNREGISTERED = re.compile(rf"DRA plugin {_DRIVER} unregistered \(endpoint (\S+)\)")
_USABLE = re.compile(rf"^(\S+ \S+) \S+ \S+ DRA driver {_DRIVER} is (usable|not usable)", re.MULTILINE)


@dataclass
class WorkloadStream:
    """Workload pods created and deleted one after another on `node` until `stop` is set."""

    world: Any  # SimWorld
    namespace: str
    node: str
    template: str
    pods: int = 0
    claims: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> WorkloadStream:
        self._thread = threading.Thread(target=self._run, name=f"stream-{self.node}", daemon=True)
        self._thread.start()
        return self

    def finish(self, timeout: float = 180) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _has_channel(self, pod: dict) -> bool:
        out = self.world.exec(self.namespace, pod["metadata"]["name"], ["test", "-c", channel_device_path(0)], None)
        return out.returncode == 0

    def _run(self) -> None:
        raw = self.world.raw
        while not self.stop.is_set() and not self.problems:
            name = f"{self.node}-w{self.pods}"
            self.pods += 1
            try:
                raw.create(scenario.PODS, scenario.workload_pod(name, self.namespace, self.template, node=self.node),
                           self.namespace)
                (pod,) = scenario.wait_pods_running(raw, self.namespace, [name], 180)
                self.claims.append(scenario.claim_of(raw, pod)["metadata"]["uid"])
                if not self._has_channel(pod):
                    self.problems.append(f"{name}: no channel inside the container once running")
                self.stop.wait(1.0)  # the workload's life: a plugin instance may come or go meanwhile
                if not self._has_channel(pod):
                    self.problems.append(f"{name}: the channel went from inside the running container")
                raw.delete(scenario.PODS, name, self.namespace)
                self._wait_gone(name)
            except Exception as exc:  # noqa: BLE001 - the caller reports it
                self.problems.append(f"{name}: {exc}")


    def _wait_gone(self, name: str) -> None:
        raw = self.world.raw
        scenario.wait_for(f"pod {name} gone", lambda: raw.get_or_none(scenario.PODS, name, self.namespace) is None, 180)


def plugin_pods(world: Any, namespace: str) -> list[dict]:
    return world.raw.list(scenario.PODS, namespace=namespace, label_selector=PLUGIN_LABELS)["items"]


def upgrade_plugin(world: Any, release: str, chart_args: list[str], namespace: str, image_tag: str,
                   values: tuple[str, ...] = (), timeout: float = 300) -> float:
    """`helm upgrade` to `image_tag` (plus `values`), then wait until each node runs one Ready
    plugin pod of that tag and nothing else; the seconds it took."""
    started = time.monotonic()
    out = world.helm_cmd("upgrade", release, *chart_args, "--namespace", namespace, "--set",
                         f"image.tag={image_tag}", *values)
    if out.returncode != 0:
        raise scenario.ScenarioError(f"helm upgrade failed:\n{out.stderr[-3000:]}")
    nodes = {n.name for n in world.nodes}

    def done() -> scenario.Seen:
        pods = plugin_pods(world, namespace)
        seen = sorted((p["spec"].get("nodeName", ""), p["spec"]["containers"][0]["image"], scenario.pod_ready(p))
                      for p in pods)
        new_ready = {n for n, image, ready in seen if image.endswith(f":{image_tag}") and ready}
        return scenario.Seen(new_ready == nodes and len(pods) == len(nodes), None, str(seen))

    scenario.wait_for(f"every plugin pod replaced by a Ready one of tag {image_tag}", done, timeout)
    return time.monotonic() - started


@dataclass
class NodeEvidence:
    """What one node's log says about the driver's plugin instances and the calls made to them."""

    calls: list[DraCall]  # the calls for the claims asked about
    registrations: list[tuple[str, str]]  # ("registered" | "unregistered", endpoint file name), in order
    gaps_s: list[float]  # each time the driver was not usable: for how long (still open: until the log's end)

    @property
    def failed(self) -> list[DraCall]:
        return [c for c in self.calls if not c.ok]

    def unprepared_once(self) -> bool:
        """Every claim asked about was unprepared by exactly one successful call."""
        claims = {u for c in self.calls for u in c.claims}
        done = [u for c in self.calls if c.method == "NodeUnprepareResources" and c.ok for u in c.claims]
        return sorted(done) == sorted(claims)


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def node_evidence(log_text: str, claims: set[str]) -> NodeEvidence:
    """The evidence in (a part of) a node's log."""
    calls = [c for c in read_calls(log_text) if set(c.claims) & claims]
    found = [(m.start(), "registered", m.group(1)) for m in _REGISTERED.finditer(log_text)]
    found += [(m.start(), "unregistered", m.group(1)) for m in _UNREGISTERED.finditer(log_text)]
    registrations = [(kind, endpoint.rsplit("/", 1)[-1]) for _, kind, endpoint in sorted(found)]
    gaps, down = [], None
    for m in _USABLE.finditer(log_text):
        at = _stamp(m.group(1))
        if m.group(2) == "not usable":
            down = at
        elif down is not None:
            gaps.append(round(at - down, 2))
            down = None
    return NodeEvidence(calls, registrations, gaps)
