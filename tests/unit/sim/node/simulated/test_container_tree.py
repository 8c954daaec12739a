"""A container's command among its init's children: the innermost namespace pid."""

from __future__ import annotations

import pytest

from cdriver.sim.node.simulated.container_tree import COMMAND_NS_PID, innermost_pid

STATUS = "Name:\tsleep\nTgid:\t4242\nPid:\t4242\nPPid:\t4241\nNSpid:\t{}\nNSpgid:\t4240\t1\n"


@pytest.mark.parametrize(("nspid", "expected"), [
    ("4242\t2", COMMAND_NS_PID),  # the command, seen from the machine
    ("4243\t7", 7),  # something else in the container
    ("4242", 4242),  # a process of the machine's namespace
    ("9\t4242\t2", 2),  # nested namespaces: the innermost counts
])
def test_innermost_pid_is_the_last_nspid_field(nspid: str, expected: int) -> None:
    assert innermost_pid(STATUS.format(nspid)) == expected


def test_no_nspid_line_gives_none() -> None:
    assert innermost_pid("Name:\tsleep\nPid:\t4242\n") is None
