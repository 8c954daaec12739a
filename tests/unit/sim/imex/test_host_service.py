"""The simulated host IMEX service's files: layout, config and nodes config (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.imex.config import parse_config, parse_nodes_config
from cdriver.roles.host_check.cli import command as host_check_command
from cdriver.sim.imex.host_service import (
    UNIX_PATH_MAX,
    HostImexError,
    HostImexPaths,
    HostImexService,
    check_ip,
    host_check_args,
    nodes_config_members,
    render_host_config,
)


def test_layout_sits_below_the_driver_root(tmp_path: Path) -> None:
    paths = HostImexPaths.for_root(tmp_path)
    assert paths.config == tmp_path / "etc/nvidia-imex/config.cfg"
    assert paths.nodes_config == tmp_path / "etc/nvidia-imex/nodes_config.cfg"
    assert paths.socket == tmp_path / "etc/nvidia-imex/imex_ctrl.sock"
    assert paths.daemon == tmp_path / "usr/bin/nvidia-imex"
    assert paths.ctl == tmp_path / "usr/bin/nvidia-imex-ctl"
    assert HostImexPaths.for_root(tmp_path, "/run/imex.sock").socket == tmp_path / "run/imex.sock"
    with pytest.raises(HostImexError, match="must be absolute"):
        HostImexPaths.for_root(tmp_path, "run/imex.sock")


def test_config_carries_the_real_keys_with_absolute_paths(tmp_path: Path) -> None:
    paths = HostImexPaths.for_root(tmp_path)
    text = render_host_config(paths, "127.0.1.3", server_port=41000, cmd_port=41005, node_name="worker-3")
    values = parse_config(text)
    assert values["IMEX_CMD_ENABLED"] == "1"
    assert values["IMEX_CMD_UNIX_DOMAIN_PATH"] == str(tmp_path / "etc/nvidia-imex/imex_ctrl.sock")
    assert values["IMEX_NODE_CONFIG_FILE"] == str(tmp_path / "etc/nvidia-imex/nodes_config.cfg")
    assert values["IMEX_CMD_BIND_INTERFACE_IP"] == "127.0.1.3"
    assert (values["SERVER_PORT"], values["IMEX_CMD_PORT"]) == ("41000", "41005")
    assert values["DAEMONIZE"] == "0"
    assert text.startswith("# Host nvidia-imex service of simulated node worker-3")
    assert "ComputeDomain daemon" not in text  # the template's per-domain note is not copied


def test_nodes_config_lists_this_node_and_each_peer_once() -> None:
    assert nodes_config_members("127.0.1.1", []) == ["127.0.1.1"]
    assert nodes_config_members("127.0.1.1", ["127.0.1.2", "127.0.1.2"]) == ["127.0.1.1", "127.0.1.2"]
    assert nodes_config_members("127.0.1.2", ["127.0.1.1", "127.0.1.2"]) == ["127.0.1.1", "127.0.1.2"]
    # the same file on every node of the domain, whichever node writes it
    assert nodes_config_members("127.0.1.2", ["127.0.1.1"]) == nodes_config_members("127.0.1.1", ["127.0.1.2"])
    assert nodes_config_members("127.0.1.10", ["127.0.1.9"]) == ["127.0.1.9", "127.0.1.10"]
    with pytest.raises(HostImexError, match="peer 'worker-2' is not an IP address"):
        nodes_config_members("127.0.1.1", ["worker-2"])


def test_bad_ip_names_the_option() -> None:
    assert check_ip("0:0::1") == "::1"
    with pytest.raises(HostImexError, match=r"--ip '10\.0\.0' is not an IP address"):
        check_ip("10.0.0")


def test_socket_path_longer_than_a_unix_address_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * (UNIX_PATH_MAX - len(str(tmp_path))))
    with pytest.raises(HostImexError, match="a Unix socket path holds at most 107"):
        HostImexService(deep, "127.0.1.1")


def test_write_config_refuses_a_directory_without_the_stand_in(tmp_path: Path) -> None:
    service = HostImexService(tmp_path, "127.0.1.1", ["127.0.1.2"])
    with pytest.raises(HostImexError, match="not a simulated driver root; create it with `cdriver sim driver-root`"):
        service.write_config()
    assert not service.paths.config.exists()


def test_write_config_writes_both_files(tmp_path: Path) -> None:
    daemon = tmp_path / "usr/bin/nvidia-imex"
    daemon.parent.mkdir(parents=True)
    daemon.write_text("#!/bin/sh\n")
    service = HostImexService(tmp_path, "127.0.1.1", ["127.0.1.2"])
    assert service.write_config() == tmp_path / "etc/nvidia-imex/config.cfg"
    assert parse_nodes_config(service.paths.nodes_config.read_text()) == ["127.0.1.1", "127.0.1.2"]
    assert parse_config(service.paths.config.read_text())["IMEX_CMD_UNIX_DOMAIN_PATH"] == str(service.paths.socket)


def test_host_check_args_limit_the_check_to_the_nodes_own_service(tmp_path: Path) -> None:
    ctx = host_check_command.make_context("host-check", host_check_args(tmp_path))
    assert ctx.params["driver_root"] == str(tmp_path)
    assert ctx.params["only_under_root"] is True
    assert host_check_command.make_context("host-check", []).params["only_under_root"] is False
