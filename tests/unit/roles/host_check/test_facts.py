"""Which running nvidia-imex is this node's host service: process facts in, verdict out."""

from __future__ import annotations

from cdriver.roles.host_check.facts import counts_as_host_service, is_under

HOST_CONFIG = "/etc/nvidia-imex/config.cfg"


def test_a_host_daemon_counts_whatever_its_config_path() -> None:
    assert counts_as_host_service(False, HOST_CONFIG, None)
    assert counts_as_host_service(False, "/srv/imex/site.cfg", None)


def test_a_daemon_in_a_pod_never_counts() -> None:
    assert not counts_as_host_service(True, HOST_CONFIG, None)
    assert not counts_as_host_service(True, "/sim/a/etc/nvidia-imex/config.cfg", "/sim/a")


def test_limited_to_a_config_root_only_daemons_configured_below_it_count() -> None:
    assert counts_as_host_service(False, "/sim/a/etc/nvidia-imex/config.cfg", "/sim/a")
    assert not counts_as_host_service(False, "/sim/b/etc/nvidia-imex/config.cfg", "/sim/a")
    assert not counts_as_host_service(False, HOST_CONFIG, "/sim/a")


def test_a_sibling_whose_name_extends_the_root_is_not_below_it() -> None:
    assert not is_under("/sim/ab/etc/nvidia-imex/config.cfg", "/sim/a")
    assert is_under("/sim/a/etc/nvidia-imex/config.cfg", "/sim/a/")


def test_everything_is_below_the_filesystem_root() -> None:
    assert is_under(HOST_CONFIG, "/")
    assert counts_as_host_service(False, HOST_CONFIG, "/")
