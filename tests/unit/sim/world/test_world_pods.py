"""Telling the two charts' driver pods apart: both carry upstream's component label."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.sim.world.world import DRIVER_CDRIVER, DRIVER_UPSTREAM, component_of, driver_of


def pod(**labels: str) -> dict:
    return {"metadata": {"name": "p", "labels": labels}}


CDRIVER_PLUGIN = pod(**{"app.kubernetes.io/name": "cdriver", "app.kubernetes.io/component": "kubelet-plugin",
                        constants.LABEL_COMPONENT: "kubelet-plugin"})
UPSTREAM_CONTROLLER = pod(**{"app.kubernetes.io/name": constants.UPSTREAM_CHART_NAME,
                             constants.LABEL_COMPONENT: "controller"})


def test_component_from_either_charts_labels() -> None:
    assert component_of(CDRIVER_PLUGIN) == constants.COMPONENT_KUBELET_PLUGIN
    assert component_of(UPSTREAM_CONTROLLER) == constants.COMPONENT_CONTROLLER
    assert component_of(pod(**{"app.kubernetes.io/component": "controller"})) == "controller"
    assert component_of(pod(app="workload")) == ""


def test_driver_from_the_charts_name_label() -> None:
    assert driver_of(CDRIVER_PLUGIN) == DRIVER_CDRIVER
    assert driver_of(UPSTREAM_CONTROLLER) == DRIVER_UPSTREAM
    # a workload, or a daemon pod of a domain, is neither chart's driver pod
    assert driver_of(pod(**{"app.kubernetes.io/name": "cdriver"})) == ""
    assert driver_of(pod(**{constants.LABEL_COMPONENT: "controller", "app.kubernetes.io/name": "other"})) == ""
