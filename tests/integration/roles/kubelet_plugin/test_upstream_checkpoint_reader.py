"""Switching back to the upstream plugin: the checkpoint cdriver's plugin leaves is read by
upstream's own checkpoint code (built from its source by hack/peer-checkpoint/build.sh), with
every prepared claim, its state and devices, and a valid checksum."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdriver.api.constants import LABEL_COMPUTE_DOMAIN
from cdriver.checkout import HACK_DIR
from cdriver.checkpoint import read_boot_id
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME
from cdriver.sim.world.upstream_driver import EXIT_NO_TARBALL
from tests.support.kubelet import Kubelet
from tests.support.objects import allocated_claim, channel_params, make_cd, set_clique_ready, uid_of
from tests.support.plugin_process import PluginProcess, SimNode
from tests.support.upstream_inputs import skip_without_upstream

BUILD = HACK_DIR / "peer-checkpoint" / "build.sh"


@pytest.fixture(scope="module")
def upstream_reader() -> Path:
    out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1500)
    if out.returncode == EXIT_NO_TARBALL:  # an input this repository cannot carry (upstream's code)
        skip_without_upstream(f"upstream's checkpoint reader cannot be built here: {out.stderr.strip()[-500:]}")
    if out.returncode != 0:
        pytest.fail(f"building upstream's checkpoint reader failed ({BUILD}):\n{out.stderr[-3000:]}", pytrace=False)
    return Path(out.stdout.strip().splitlines()[-1])


def upstream_view(reader: Path, checkpoint: Path) -> dict:
    out = subprocess.run([str(reader), str(checkpoint)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"upstream cannot read the checkpoint: {out.stderr}"
    return json.loads(out.stdout)


@pytest.mark.timeout(1800)
def test_upstream_reads_the_checkpoint_cdriver_leaves(upstream_reader: Path,
                                                       plugin_factory: Callable[..., PluginProcess],
                                                       raw: RawClient, namespace: str, node: SimNode,
                                                       driver_ns: str) -> None:
    plugin = plugin_factory(node)
    cd = make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, cd, node)
    prepared = allocated_claim(raw, namespace, node.name, channel_params(cd))
    assert Kubelet(plugin).prepare(prepared)[uid_of(prepared)].error == ""
    assert plugin.stop() == 0  # the switch back: cdriver's plugin goes, its checkpoint stays

    view = upstream_view(upstream_reader, plugin.plugin_dir / CHECKPOINT_FILE_NAME)
    assert view["nodeBootID"] == read_boot_id()
    assert view["claims"] == {uid_of(prepared): {
        "state": "PrepareCompleted", "name": prepared["metadata"]["name"], "namespace": namespace,
        "devices": [f"{node.name}/channel-0"]}}


def upstream_written(reader: Path, claims: dict) -> str:
    out = subprocess.run([str(reader), "write"], input=json.dumps({"nodeBootID": read_boot_id(), "claims": claims}),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.timeout(1800)
def test_plugin_takes_over_upstreams_checkpoint_and_hands_it_back(upstream_reader: Path, cluster: Any,
                                                                   raw: RawClient, namespace: str, node: SimNode,
                                                                   driver_ns: str) -> None:
    from cdriver.api.constants import CDI_KIND_CLAIM

    # The node serves this test's domain only (the first test's claim was never unprepared).
    raw.patch(RESOURCES["nodes"], node.name, {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: None}}})
    cd = make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, cd, node)
    old = allocated_claim(raw, namespace, node.name, channel_params(cd))
    old_cdi = f"{CDI_KIND_CLAIM}={uid_of(old)}-channel-0"
    # What the upstream plugin left: the claim prepared, for a pod that is still running.
    base = Path(f"/tmp/kpu-{uid_of(old)[:6]}")
    plugin = PluginProcess(node, Path(cluster.kubeconfig), driver_ns, base)
    plugin.plugin_dir.mkdir(parents=True)
    (plugin.plugin_dir / CHECKPOINT_FILE_NAME).write_text(upstream_written(upstream_reader, {uid_of(old): {
        "state": "PrepareCompleted", "name": old["metadata"]["name"], "namespace": namespace,
        "domainID": uid_of(cd), "devices": [{"type": "channel", "id": 0, "pool": node.name, "device": "channel-0",
                                             "requests": ["channel"], "cdiDeviceIDs": [old_cdi]}]}}))
    try:
        plugin.start()
        kubelet = Kubelet(plugin)
        # Kubelet asks again after the switch: the same devices, nothing prepared anew.
        again = kubelet.prepare(old)[uid_of(old)]
        assert again.error == "" and [list(d.cdi_device_ids) for d in again.devices] == [[old_cdi]]
        # The running workload keeps its channel: another domain's claim cannot take channel 0.
        other = make_cd(raw, namespace)
        set_clique_ready(raw, driver_ns, other, node)
        new = allocated_claim(raw, namespace, node.name, channel_params(other))
        assert f"channel 0 already allocated by claim {uid_of(old)}" in kubelet.prepare(new)[uid_of(new)].error
        # The old claim's pod ends: unprepare works, and a new claim gets the channel.
        assert kubelet.unprepare(old) == {uid_of(old): ""}
        assert kubelet.prepare(new)[uid_of(new)].error == ""
        assert plugin.stop() == 0

        view = upstream_view(upstream_reader, plugin.plugin_dir / CHECKPOINT_FILE_NAME)
        assert view["claims"] == {uid_of(new): {"state": "PrepareCompleted", "name": new["metadata"]["name"],
                                                "namespace": namespace, "devices": [f"{node.name}/channel-0"]}}
    finally:
        plugin.stop()
        subprocess.run(["rm", "-rf", str(base)], check=False)
