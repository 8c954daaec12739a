"""Keeps the plugin's device health report current (the effects around `device_health`).

Recomputes the report whenever the plugin's caches change (ComputeDomains, cliques, the node),
a claim is prepared or unprepared, and every `interval` seconds, when it also reads the GPUs'
fabric state through NVML (and looks for the fabric-imex-mgmt capability) and, in host-managed
mode, asks the host's `nvidia-imex` for READY. The report goes to the `HealthFeed` kubelet's
health stream reads; the channel devices' taints (`channel_taints`) to `on_taints`, the slice
publisher.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cdriver.dra.resource_health import HealthFeed
from cdriver.errors import CdriverError
from cdriver.kube.objects import meta_of
from cdriver.nvml import discover as nvml
from cdriver.roles.kubelet_plugin.claims import KIND_DAEMON
from cdriver.roles.kubelet_plugin.device_health import (
    FABRIC_UNREADABLE,
    NO_FABRIC_MGMT,
    HealthInputs,
    channel_taints,
    device_health,
    fabric_problems,
)
from cdriver.roles.kubelet_plugin.devices import published_devices
from cdriver.roles.kubelet_plugin.discovery import DiscoveryError, fabric_mgmt_device
from cdriver.roles.kubelet_plugin.host_imex import check_host_imex
from cdriver.roles.kubelet_plugin.readiness import node_readiness
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)

#: how often the fabric (and the host's nvidia-imex) is probed and the report recomputed anyway
PROBE_INTERVAL = 5.0


class HealthMonitor:
    """One thread computing this node's device health into `feed`."""

    def __init__(self, state: PluginState, feed: HealthFeed, interval: float = PROBE_INTERVAL) -> None:
        self.state = state
        self.feed = feed
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[str, str] = {}
        #: receives the channel devices' taints whenever they change (the slice publisher)
        self.on_taints: Callable[[list[dict]], None] = lambda taints: None
        self._taints: list[dict] | None = None
        self._probed: tuple[list[tuple[str, str]], str] | None = None
        self._probed_at = 0.0

    def start(self) -> HealthMonitor:
        self.update()
        self._thread = threading.Thread(target=self._run, name="device-health", daemon=True)
        self._thread.start()
        return self

    def send_taints_to(self, receiver: Callable[[list[dict]], None]) -> None:
        """From now on give the channel devices' taints to `receiver`, starting with the current ones."""
        self.on_taints = receiver
        receiver(list(self._taints or []))

    def poke(self) -> None:
        """Recompute soon (a claim was prepared or unprepared)."""
        self.state.notifier.notify()

    def stop(self) -> None:
        self._stop.set()
        self.state.notifier.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.feed.close()

    def _run(self) -> None:
        generation = self.state.notifier.generation()
        while not self._stop.is_set():
            generation = self.state.notifier.wait_change(generation, self.interval)
            if self._stop.is_set():
                return
            try:
                self.update()
            except Exception:  # noqa: BLE001 - health reporting never takes the plugin down
                log.exception("computing device health failed")

    def update(self) -> None:
        inputs = self.inputs()
        taints = channel_taints(inputs)
        if taints != self._taints:
            if taints or self._taints:
                why = inputs.fabric_problem or inputs.host_problem
                t = taints[0] if taints else {}
                log.info("channel devices of node %s: %s", inputs.node_name,
                         f"tainted {t.get('key')}={t.get('value')}:{t.get('effect')} ({why})" if taints
                         else "taint removed")
            self._taints = taints
            self.on_taints(taints)
        report = device_health(inputs)
        if self.feed.publish(report):
            for d in report:
                if self._last.get(d.device) != d.health:
                    log.info("device %s is %s: %s", d.device, d.health, d.message)
                self._last[d.device] = d.health

    # -- inputs --------------------------------------------------------------------------
    def inputs(self) -> HealthInputs:
        st, cfg = self.state, self.state.config
        clique_id = st.discovery.clique_id
        problems, host_problem = self._probe(clique_id)
        return HealthInputs(
            node_name=cfg.node_name, devices=tuple(published_devices(cfg.host_managed)),
            host_managed=cfg.host_managed, clique_id=clique_id,
            fabric_problem="; ".join(what for _, what in problems), fabric_code=problems[0][0] if problems else "",
            host_problem=host_problem, holders={} if cfg.host_managed else self._holders(clique_id))

    def _probe(self, clique_id: str) -> tuple[list[tuple[str, str]], str]:
        """The fabric's problems and the host service's, probed at most once an interval (a cache
        change recomputes the report without asking NVML or nvidia-imex again)."""
        now = time.monotonic()
        if self._probed is None or now - self._probed_at >= self.interval * 0.9:
            host_managed = self.state.config.host_managed
            self._probed = (self._fabric_problems(clique_id) if clique_id else [],
                            self._host_problem() if host_managed and clique_id else "")
            self._probed_at = now
        return self._probed

    def _fabric_problems(self, clique_id: str) -> list[tuple[str, str]]:
        read_root = self.state.config.read_root
        try:
            problems = fabric_problems(nvml.read_fabric(read_root), clique_id)
        except CdriverError as exc:
            problems = [(FABRIC_UNREADABLE, f"reading the GPUs' fabric state failed: {exc}")]
        try:
            fabric_mgmt_device(read_root)
        except DiscoveryError as exc:
            problems.append((NO_FABRIC_MGMT, str(exc)))
        return problems

    def _host_problem(self) -> str:
        cfg = self.state.config
        return check_host_imex(cfg.read_root, cfg.imex_host_socket_path, timeout=min(5.0, self.interval))

    def _holders(self, clique_id: str) -> dict[str, tuple[bool, str, str]]:
        st, cfg = self.state, self.state.config
        try:
            records = st.store.read().claims.values()
        except CdriverError as exc:
            log.debug("device health: checkpoint unreadable: %s", exc)
            return {}
        domains = {r.domain_id: r.namespace for r in records if r.kind != KIND_DAEMON and r.completed_devices()}
        out = {}
        for domain, namespace in sorted(domains.items()):
            cd = st.domain_of_claim(domain, namespace)
            meta = meta_of(cd) if cd is not None else {}
            label = f"{meta.get('namespace')}/{meta.get('name')} ({domain})" if meta else domain
            ready, why = node_readiness(cfg.node_name, domain, clique_id, st.clique(domain), cd, cfg.use_cliques,
                                        cfg.namespace)
            out[domain] = (ready, why, label)
        return out
