"""Whole simulated clusters for the e2e and reliability tests: starting one per test module, and
the helpers that read and drive it (exec into pods, domains created and deleted).

A world's base directory is short because Unix socket paths under a node's root are limited to
107 bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cdriver.api import constants
from cdriver.imex.config import IMEX_DAEMON_BINARY
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.world import scenario
from cdriver.sim.world.world import (
    COMPONENT_LABELS,
    DRIVER_CDRIVER,
    DRIVER_NAMESPACE,
    RELEASE,
    SimWorld,
    WorldSettings,
)

#: chart values for host-managed worlds: a Prepare gives up on a missing host IMEX service after
#: 5 s instead of 30 s (kubelet retries it), so tests that wait for failed attempts wait less
SHORT_HOST_WAIT = ["--set", "kubeletPlugin.env[0].name=PREPARE_TIMEOUT",
                   "--set", "kubeletPlugin.env[0].value=5s"]


def start_world(settings_kwargs: dict, name: str) -> Iterator[SimWorld]:
    """Start a world (`WorldSettings` of `settings_kwargs`, fast timings) named `name`, yield it, stop it."""
    # one fixed directory per world: a run killed midway leaves its files and processes there,
    # and the next run's nodes find and end those processes when they start
    base = Path(f"/tmp/cde-{os.getuid()}-{name}")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    # fast retries and heartbeats: the default is kubelet's timings (sim up, demo, benchmarks)
    world = SimWorld(WorldSettings(base_dir=base, **{"fast": True, **settings_kwargs}), progress=print)
    world.start()
    try:
        yield world
    finally:
        world.stop()
        if os.environ.get("CDRIVER_E2E_KEEP"):
            print(f"e2e world files kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def text(data: bytes | str | None) -> str:
    """A process's output as text."""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data or ""


def exec_in(world: SimWorld, namespace: str, pod: dict, argv: list[str],
            container: str | None = None) -> subprocess.CompletedProcess:
    """`kubectl exec` into a pod's container (the simulated node serves the kubelet API)."""
    return world.exec(namespace, pod["metadata"]["name"], argv, container)


def cliques(world: SimWorld) -> list[str]:
    """The world's clique IDs, sorted."""
    return sorted({n.clique for n in world.nodes if n.clique})


def clique_nodes(world: SimWorld, clique: str) -> list[str]:
    """The names of the nodes of `clique`, sorted."""
    return sorted(n.name for n in world.nodes if n.clique == clique)


def create_domain(world: SimWorld, ns: str, name: str, mode: str = constants.ALLOCATION_MODE_SINGLE,
                  num_nodes: int = 0) -> str:
    """Create a ComputeDomain (template `<name>-channel`), wait for its template; its UID."""
    scenario.ensure_namespace(world.raw, ns)
    cd = world.raw.create(scenario.CDS, scenario.compute_domain(name, ns, f"{name}-channel", mode, num_nodes), ns)
    scenario.wait_for(f"workload template {ns}/{name}-channel",
                      lambda: world.raw.get_or_none(scenario.RCTS, f"{name}-channel", ns), 60)
    return cd["metadata"]["uid"]


def delete_all(world: SimWorld, ns: str, pods: list[str], cd_name: str, uid: str) -> None:
    """Delete pods and CD; assert that nothing the driver generated remains."""
    for pod in pods:
        try:
            world.raw.delete(scenario.PODS, pod, ns)
        except Exception:  # already gone
            pass
    world.raw.delete(scenario.CDS, cd_name, ns)

    def gone() -> scenario.Seen:
        left = scenario.generated_objects(world.raw, DRIVER_NAMESPACE, uid)
        left["pods"] = [p for p in pods if world.raw.get_or_none(scenario.PODS, p, ns)]
        left["cd"] = [cd_name] if world.raw.get_or_none(scenario.CDS, cd_name, ns) else []
        return scenario.Seen(not any(left.values()), left, json.dumps(left))

    scenario.wait_for("every object of the domain to be deleted", gone, 120)


def driver_pods(world: SimWorld) -> list[dict]:
    """The controller and kubelet-plugin pods of either chart."""
    pods = world.raw.list(scenario.PODS, namespace=DRIVER_NAMESPACE)["items"]
    return [p for p in pods if any((p["metadata"].get("labels") or {}).get(key) in ("controller", "kubelet-plugin")
                                   for key in COMPONENT_LABELS)]


def upgrade_gates(world: SimWorld, gates: dict[str, bool]) -> None:
    """`helm upgrade` cdriver's release with `gates` changed; return once a new controller and new
    plugins (one per node) are all Ready and every node's kubelet has the new registration."""
    before = {p["metadata"]["uid"] for p in driver_pods(world)}
    started = time.monotonic()
    world.settings.feature_gates.update(gates)
    out = world.helm_cmd("upgrade", RELEASE, *world.chart_args(DRIVER_CDRIVER), "--namespace", DRIVER_NAMESPACE)
    assert out.returncode == 0, f"helm upgrade with {gates} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}"

    def rolled() -> scenario.Seen:
        seen = sorted((p["spec"].get("nodeName", ""), p["metadata"]["uid"] in before, scenario.pod_ready(p),
                       p["metadata"]["name"]) for p in driver_pods(world))
        done = len(seen) == 1 + len(world.nodes) and not any(old or not ready for _, old, ready, _ in seen)
        return scenario.Seen(done, None, json.dumps(seen))

    scenario.wait_for(f"a new controller and new plugins with {gates}, all Ready", rolled, 180)

    # a real kubelet's registrations are not readable from here; there a new plugin pod is Ready
    # (`rolled`) only once its kubelet confirmed the registration (the chart's readiness probe)
    simulated = [n for n in world.nodes if hasattr(n.agent, "plugins")]

    def registered() -> scenario.Seen:
        late = [n.name for n in simulated if not n.agent.plugins.usable(constants.DRIVER_NAME) or max(
            (p.registered_at for p in n.agent.plugins.plugins() if p.driver == constants.DRIVER_NAME),
            default=0.0) < started]
        return scenario.Seen(not late, None, f"not registered anew on {late}")

    scenario.wait_for("the new plugins registered with every node's kubelet", registered, 60)


def assert_kept_running(world: SimWorld, ns: str, pods: dict[str, dict]) -> None:
    """The same pods, never restarted, still Running with their channel device."""
    for name, before in pods.items():
        now = world.raw.get(scenario.PODS, name, ns)
        assert now["metadata"]["uid"] == before["metadata"]["uid"] and scenario.pod_phase(now) == "Running", name
        restarts = [s.get("restartCount", 0) for s in now["status"].get("containerStatuses") or []]
        assert restarts == [0], f"{name} restarted: {restarts}"
        assert is_char_device(world, ns, now, channel_device_path(0)), f"{name} lost its channel device"


def is_char_device(world: SimWorld, ns: str, pod: dict, path: str) -> bool:
    """Whether `path` is a character device inside the pod."""
    out = exec_in(world, ns, pod, ["test", "-c", path])
    return out.returncode == 0


def reported_ready(world: SimWorld, pod: dict, domain_uid: str) -> dict:
    """The running pod's channel claim's status.devices entry of this driver, once it reports the
    claim Ready (DaemonReady) for `domain_uid`, with this node's daemon index; its `data`."""
    def entry() -> scenario.Seen:
        claim = scenario.claim_of(world.raw, pod)
        found = [d for d in (claim.get("status") or {}).get("devices") or [] if d["driver"] == constants.DRIVER_NAME]
        ready = [c for d in found for c in d.get("conditions") or []
                 if c["type"] == "Ready" and (c["status"], c["reason"]) == ("True", "DaemonReady")]
        return scenario.Seen(len(found) == 1 and bool(ready), found[0] if found else None, json.dumps(found))

    found = scenario.wait_for(f"{pod['metadata']['name']}'s claim to report DaemonReady in status.devices", entry, 30)
    data = found["data"]
    assert data["computeDomain"]["uid"] == domain_uid and data["kind"] == "channel", data
    assert isinstance(data["daemon"]["index"], int) and data["daemon"]["dnsName"], data
    assert data["cdiDeviceIDs"] and data["cliqueID"], data
    return data


def channel_health(world: SimWorld, namespace: str, pod_name: str) -> tuple[str, str] | None:
    """(health, message) of the pod's first container's channel claim, from allocatedResourcesStatus
    (None before kubelet shows one)."""
    pod = world.raw.get(scenario.PODS, pod_name, namespace)
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for status in cs.get("allocatedResourcesStatus") or []:
            if status["name"].startswith("claim:"):
                found = status.get("resources") or []
                if found:
                    return found[0].get("health", ""), found[0].get("message", "")
    return None


#: kills the IMEX daemon's nvidia-imex from inside its container (its own PID namespace), prints how many
KILL_IMEX = ('n=0; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = nvidia-imex ] && '
             'kill -9 "${p#/proc/}" && n=$((n+1)); done; echo "killed=$n"')


def health_after_imex_kill(world: SimWorld, namespace: str, pod_name: str, daemon_pod: dict,
                           timeout: float = 120.0) -> dict[str, Any]:
    """Kill the daemon's nvidia-imex under a running workload and follow the workload's channel
    health in its pod status: {"unhealthy_s", "healthy_again_s", "message"} (seconds after the kill)."""
    scenario.wait_for(f"{pod_name}'s channel Healthy in its pod status",
                      lambda: scenario.Seen((channel_health(world, namespace, pod_name) or ("",))[0] == "Healthy",
                                            None, str(channel_health(world, namespace, pod_name))), 60)
    out = exec_in(world, daemon_pod["metadata"]["namespace"], daemon_pod, ["/bin/sh", "-c", KILL_IMEX])
    killed = time.monotonic()
    assert "killed=1" in text(out.stdout), f"no nvidia-imex killed in the daemon pod: {text(out.stdout)}{out.stderr}"
    seen: dict[str, Any] = {}
    while time.monotonic() - killed < timeout:
        health, message = channel_health(world, namespace, pod_name) or ("", "")
        if "unhealthy_s" not in seen and health == "Unhealthy":
            seen.update(unhealthy_s=round(time.monotonic() - killed, 2), message=message)
        elif "unhealthy_s" in seen and health == "Healthy":
            seen["healthy_again_s"] = round(time.monotonic() - killed, 2)
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{pod_name}'s channel health after killing nvidia-imex: {seen or 'never Unhealthy'}; "
                         f"now {channel_health(world, namespace, pod_name)}")


#: where a daemon container finds its IMEX config
IMEXD_CONFIG = "/imexd/imexd.cfg"


def domain_up(world: SimWorld, daemon_pod: dict, nodes: int) -> scenario.Seen:
    """Whether the daemon's `nvidia-imex-ctl -N -j` reports the IMEX domain UP with `nodes` READY nodes."""
    from cdriver.imex.config import IMEX_CTL_BINARY

    out = exec_in(world, DRIVER_NAMESPACE, daemon_pod, [IMEX_CTL_BINARY, "-c", IMEXD_CONFIG, "-N", "-j"])
    try:
        found = json.loads(text(out.stdout))
    except ValueError:
        return scenario.Seen(False, None, text(out.stdout) + text(out.stderr))
    listed = found.get("nodes") or {}
    ok = found.get("status") == "UP" and len(listed) == nodes and all(
        n.get("status") == "READY" for n in listed.values())
    return scenario.Seen(ok, found, json.dumps(found)[:2000])


#: The IMEX server port every simulated node's daemon listens on (on its pod IP).
IMEX_PORT = 50000


def hold_imex_port(address: str) -> socket.socket:
    """Listen on the IMEX port at `address` (a daemon pod's address to come), so that nvidia-imex
    cannot start there until the returned socket is closed."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((address, IMEX_PORT))
    holder.listen()
    return holder


@contextmanager
def imex_start_fails(world: SimWorld, node: str) -> Iterator[None]:
    """While entered, the `nvidia-imex` of `node`'s driver root exits at once with an error (an
    IMEX start-up failure): a daemon container started there meanwhile never gets Ready. The
    stand-in is put back on exit (each file replaced whole: running containers keep theirs)."""
    binary = world.node(node).driver_root / "usr/bin" / IMEX_DAEMON_BINARY
    original = binary.read_bytes()

    def replace(content: bytes) -> None:
        staged = binary.with_name(f".{binary.name}.staged")
        staged.write_bytes(content)
        staged.chmod(0o755)
        staged.replace(binary)

    replace(b"#!/bin/sh\necho 'nvidia-imex: cannot start (made to fail by a test)' >&2\nexit 1\n")
    try:
        yield
    finally:
        replace(original)
