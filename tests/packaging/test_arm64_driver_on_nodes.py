"""The linux/arm64 driver image doing its job against the real API server, as on Grace nodes.

A two-node simulated world (one clique) whose nodes map the chart's image to the unpacked arm64
image (`WorldSettings.driver_platform`): every driver pod — the controller, each node's kubelet
plugin, each domain's IMEX daemons — runs the image's own AArch64 executable through Debian's
qemu-aarch64-static, and so do the driver root's `nvidia-imex` stand-ins, over an NVML stand-in
built for AArch64. One ComputeDomain, one workload pod per node: the arm64 plugins prepare each
node's daemon claim and channel claim, the arm64 daemons report Ready in their clique, and each
workload container sees its channel. Emulation makes every start slow: the times are printed,
never asserted.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld, component_of
from tests.support.world import create_domain, delete_all, domain_up, exec_in, is_char_device, start_world, text

pytestmark = [pytest.mark.multiplatform, pytest.mark.timeout(5400)]

ARM64 = "linux/arm64"
NODES = 2
#: emulated starts are tens of times slower than native ones
EMULATED_TIMEOUT = 600


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    start = time.monotonic()
    for w in start_world({"nodes": NODES, "driver_platform": ARM64}, "arm64"):
        print(f"\n[arm64] world with the arm64 driver Ready in {time.monotonic() - start:.0f} s", flush=True)
        yield w


def driver_pods(world: SimWorld, component: str) -> list[dict]:
    pods = world.raw.list(scenario.PODS, namespace=DRIVER_NAMESPACE)["items"]
    return [p for p in pods if component_of(p) == component]


def runs_the_arm64_image(world: SimWorld, pod: dict) -> str:
    """'' when the pod's main container process is the emulator running the image's executable, else why not."""
    node = world.node(pod["spec"]["nodeName"])
    container = pod["spec"]["containers"][0]["name"]
    pid = node.agent.container_main_pid(pod["metadata"]["namespace"], pod["metadata"]["name"], container)
    if not pid:
        return f"{pod['metadata']['name']}: no running container"
    exe = os.readlink(f"/proc/{pid}/exe")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    image_exe = str(world.emulated.root / "opt/cdriver/cdriver").encode()
    if Path(exe) != world.emulated.emulator or image_exe not in argv:
        return f"{pod['metadata']['name']}: pid {pid} runs {exe} {argv[:4]}"
    return ""


def test_every_driver_pod_runs_the_arm64_executable_under_emulation(world: SimWorld) -> None:
    assert world.emulated is not None and world.emulated.emulator is not None
    assert world.emulated.emulator.name == "qemu-aarch64-static"
    plugins = driver_pods(world, constants.COMPONENT_KUBELET_PLUGIN)
    controllers = driver_pods(world, constants.COMPONENT_CONTROLLER)
    assert sorted(p["spec"]["nodeName"] for p in plugins) == sorted(n.name for n in world.nodes)
    assert [p["spec"]["containers"][0]["image"] for p in plugins + controllers] == [world.emulated.ref] * (
        len(plugins) + len(controllers))
    wrong = [why for why in (runs_the_arm64_image(world, p) for p in plugins + controllers) if why]
    assert wrong == []
    # what the image's executable says of itself, asked inside a plugin container
    out = exec_in(world, DRIVER_NAMESPACE, plugins[0], ["cdriver", "version", "--json"])
    info = json.loads(text(out.stdout))
    assert (info["machine"], info["frozen"]) == ("aarch64", True), text(out.stderr)
    # the NVML stand-in each plugin loaded is an AArch64 library
    for node in world.nodes:
        library = next(Path(node.agent.driver_root.lib_dir).glob("libnvidia-ml.so.1"))
        assert library.read_bytes()[18] == 0xB7, f"{library} is not an AArch64 ELF file"


def test_arm64_plugins_and_daemons_bring_up_a_domain_and_its_channels(world: SimWorld) -> None:
    ns, raw = "arm64", world.raw
    uid = create_domain(world, ns, "arm", num_nodes=NODES)
    names = {n.name: f"w-{n.name}" for n in world.nodes}
    start = time.monotonic()
    for node, pod in names.items():
        raw.create(scenario.PODS, scenario.workload_pod(pod, ns, "arm-channel", node=node), ns)
    pods = scenario.wait_pods_running(raw, ns, list(names.values()), EMULATED_TIMEOUT)
    took = time.monotonic() - start
    missing = [p["metadata"]["name"] for p in pods if not is_char_device(world, ns, p, channel_device_path(0))]
    assert missing == [], f"no channel0 inside {missing}"

    # each node's daemon: the arm64 image, its daemon claim prepared, Ready in the clique
    daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
    assert sorted(d["spec"]["nodeName"] for d in daemons) == sorted(names)
    assert [why for why in (runs_the_arm64_image(world, d) for d in daemons) if why] == []
    for daemon in daemons:
        claims = daemon.get("status", {}).get("resourceClaimStatuses") or []
        assert claims, f"{daemon['metadata']['name']} has no daemon claim"
        for c in claims:
            claim = raw.get(scenario.CLAIMS, c["resourceClaimName"], DRIVER_NAMESPACE)
            assert claim["status"]["allocation"]["devices"]["results"][0]["driver"] == constants.DRIVER_NAME

    def clique_ready() -> scenario.Seen:
        entries = [e for found in scenario.clique_entries(raw, DRIVER_NAMESPACE, uid).values() for e in found]
        ready = len(entries) == NODES and all(e.get("status") == constants.STATUS_READY for e in entries)
        return scenario.Seen(ready, entries, json.dumps(entries))

    entries = scenario.wait_for("both arm64 daemons Ready in the clique", clique_ready, EMULATED_TIMEOUT)
    assert sorted(e["index"] for e in entries) == list(range(NODES))

    scenario.wait_for("the IMEX domain UP across both arm64 daemons", lambda: domain_up(world, daemons[0], NODES),
                      EMULATED_TIMEOUT)
    print(f"\n[arm64] {NODES} workload pods Running with their channels {took:.0f} s after they were created "
          "(daemons, plugins and IMEX stand-ins all emulated)", flush=True)
    delete_all(world, ns, list(names.values()), "arm", uid)
