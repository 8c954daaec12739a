"""Shared pieces of the kubelet plugin's unit tests: a plugin state over a temporary directory."""

from __future__ import annotations

from pathlib import Path

from cdriver.checkpoint import CheckpointStore
from cdriver.roles.kubelet_plugin.config import PluginConfig
from cdriver.roles.kubelet_plugin.discovery import NodeDiscovery
from cdriver.roles.kubelet_plugin.metrics import PluginMetrics
from cdriver.roles.kubelet_plugin.state import BackgroundEvents, PluginState


def plugin_state(tmp_path: Path, **settings: str) -> PluginState:
    cfg = PluginConfig(node_name="node-a", cdi_root=tmp_path / "cdi", plugins_dir=tmp_path / "plugins", **settings)
    return PluginState(config=cfg, discovery=NodeDiscovery(channel_major=240, clique_id=""), raw=None,
                       store=CheckpointStore(cfg.checkpoint_path, boot_id="boot-1"), domains=None, cliques=None,
                       node=None, metrics=PluginMetrics("node-a"), events=BackgroundEvents(None))
