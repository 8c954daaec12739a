"""The plugin's channel settings from the chart: shared channels on by default, the binding
timeout, and gate ComputeDomainBindingConditions passed through the feature gates."""

from __future__ import annotations

from pathlib import Path

from tests.integration.chart.test_helm_plugin_updates import env, helm, plugin  # noqa: F401 - helm: fixture


def test_channels_are_shared_by_default_and_the_binding_timeout_follows_the_values(helm: Path) -> None:  # noqa: F811
    defaults = env(plugin(helm))
    assert (defaults["SHARE_CHANNELS"]["value"], defaults["BINDING_TIMEOUT"]["value"]) == ("true", "120s")
    assert "ComputeDomainBindingConditions" not in defaults.get("FEATURE_GATES", {}).get("value", "")
    tuned = env(plugin(helm, "--set", "kubeletPlugin.shareChannels=false", "--set", "kubeletPlugin.bindingTimeout=45s",
                       "--set", "featureGates.ComputeDomainBindingConditions=true"))
    assert (tuned["SHARE_CHANNELS"]["value"], tuned["BINDING_TIMEOUT"]["value"]) == ("false", "45s")
    assert "ComputeDomainBindingConditions=true" in tuned["FEATURE_GATES"]["value"]
