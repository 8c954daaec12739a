"""A world that fails to start leaves nothing behind in its base directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.errors import CdriverError
from cdriver.sim.world.world import SimWorld, WorldError, WorldSettings


class FailingWorld(SimWorld):
    """Gets as far as writing cluster and node files, then a step fails."""

    def _binaries(self) -> None:
        pass

    def _start_cluster(self) -> None:
        for sub in ("cluster/pki", "nodes/node-1/var/lib/kubelet"):
            (self.settings.base_dir / sub).mkdir(parents=True)
            (self.settings.base_dir / sub / "file").write_text("x")
        raise CdriverError("etcd did not start")


def test_failed_start_removes_its_directory(tmp_path: Path) -> None:
    base = tmp_path / "world"
    with pytest.raises(WorldError, match="etcd did not start"):
        FailingWorld(WorldSettings(base_dir=base), progress=lambda m: None).start()
    assert not base.exists()


def test_failed_start_keeps_files_it_did_not_create(tmp_path: Path) -> None:
    base = tmp_path / "world"
    base.mkdir()
    (base / "up.log").write_text("progress the user reads")
    with pytest.raises(WorldError):
        FailingWorld(WorldSettings(base_dir=base), progress=lambda m: None).start()
    assert sorted(p.name for p in base.iterdir()) == ["up.log"]


def test_worlds_run_kubelets_timings_unless_asked_for_fast_ones(tmp_path: Path) -> None:
    from cdriver.sim.node.simulated.runtime import NodeOptions
    from cdriver.sim.world.cli import _settings
    from cdriver.sim.world.world import node_options

    assert node_options(WorldSettings(base_dir=tmp_path)) == NodeOptions()
    assert node_options(_settings(tmp_path, 4, None, False)) == NodeOptions()  # `sim up`, `sim demo`
    assert NodeOptions().backoff_base == 10.0 and NodeOptions().backoff_max == 300.0  # kubelet's crash-loop backoff
    assert node_options(WorldSettings(base_dir=tmp_path, fast=True)) == NodeOptions.fast()
