"""Claims' status.devices for the admission tests: a claim allocated on a node to this driver's
channel and to another driver's device, and the status entries written to it."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES

CLAIMS = RESOURCES["resourceclaims"]
OTHER_DRIVER = "other.example.com"
#: each driver's allocated device
DEVICES = {constants.DRIVER_NAME: "channel-0", OTHER_DRIVER: "x-0"}


def claim_of_two_drivers(raw: RawClient, namespace: str, name: str, node: str) -> dict:
    """A claim allocated on `node` (as the scheduler records it) to this driver's channel and to
    another driver's device."""
    claim = raw.create(CLAIMS, {"metadata": {"name": name, "namespace": namespace},
                                "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
                                    "deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL}}]}}}, namespace)
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "channel", "driver": driver, "pool": node, "device": device}
                                for driver, device in DEVICES.items()]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    return raw.update_status(CLAIMS, claim, namespace)


def device_status(driver: str, pool: str, reason: str = "DaemonReady") -> dict:
    """A status.devices entry for `driver`'s device of such a claim."""
    return {"driver": driver, "pool": pool, "device": DEVICES[driver], "conditions": [
        {"type": "Ready", "status": "True", "reason": reason, "message": "m",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
