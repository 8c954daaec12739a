"""What the containers show is compared with the API: a workload's channels, its IMEX domain."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cdriver.diagnose.snapshot import Snapshot
from tests.reliability import inside
from tests.reliability.invariants import violations
from tests.reliability.test_invariants import healthy

LISTING = "total 0\ncrw-rw-rw- 1 root root 234, 0 Dec  2 17:00 channel0\n"


def seen(listing: tuple[int, str] = (0, LISTING), report: tuple[int, str] | None = None) -> dict[str, Any]:
    """The healthy snapshot plus what its workload's and its daemon's containers showed."""
    data = healthy()
    data["inPods"] = {"ns/w": inside.parse_channel_listing(*listing)}
    data["imexDomains"] = {"cdriver-system/daemon-a": inside.parse_domain_report(
        *(report or (0, '{"status": "UP", "nodes": {"0": {"status": "READY"}}}')))}
    return data


def test_the_running_workload_and_its_daemon_are_read() -> None:
    assert inside.probes(Snapshot(healthy())) == inside.Probes((("ns", "w"),), (("cdriver-system", "daemon-a"),))


def test_a_daemon_that_is_not_ready_is_not_read() -> None:
    data = healthy()
    data["pods"][1]["status"]["phase"] = "Pending"
    assert inside.probes(Snapshot(data)).daemons == ()


def test_what_agrees_with_the_api_has_no_violations() -> None:
    assert violations(seen(), inside.INSIDE) == []


@pytest.mark.parametrize(("listing", "report", "expected"), [
    ((0, "total 0\n"), None, "the container sees [] in /dev/nvidia-caps-imex-channels, its claims hold ['channel0']"),
    ((0, LISTING.replace("channel0", "channel1")), None, "sees ['channel1']"),
    ((0, LISTING.replace("crw", "-rw")), None, "the container sees []"),
    ((2, "ls: cannot access"), None, "cannot list its channels inside the container: ls -l"),
    ((0, LISTING), (0, '{"status": "DEGRADED", "nodes": {}}'), "reports the domain 'DEGRADED'"),
    ((0, LISTING), (1, "cannot connect"), "nvidia-imex-ctl -c /imexd/imexd.cfg -N -j exited 1: cannot connect"),
    ((0, LISTING), (0, "not json"), "printed no JSON"),
    ((0, LISTING), (0, '{"status": "UP", "nodes": {"0": {}, "1": {}}}'),
     "the domain is UP with 2 node(s), its clique has 1 daemon pod(s)"),
])
def test_each_disagreement_is_named(listing: tuple[int, str], report: tuple[int, str] | None, expected: str) -> None:
    found = violations(seen(listing, report), inside.INSIDE)
    assert any(expected in line for line in found), found


def test_a_pod_that_stopped_since_the_snapshot_is_judged_next_time() -> None:
    data = copy.deepcopy(seen((0, "total 0\n")))
    data["pods"][0]["status"]["phase"] = "Succeeded"
    assert violations(data, inside.INSIDE) == []
