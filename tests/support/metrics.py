"""Reading a role's Prometheus endpoint in tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def sample_value(url: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` at ``url``; None when not exported."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None
