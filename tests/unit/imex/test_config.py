"""IMEX config template rendering, config parsing and nodes config."""

from __future__ import annotations

import os

import pytest

from cdriver.api import constants
from cdriver.imex import config
from cdriver.imex.config import (
    DEFAULT_IMEX_NODES_CONFIG,
    IMEX_CMD_PORT,
    IMEX_SERVER_PORT,
    IMEXD_NODES_CONFIG,
    ImexConfig,
    ImexConfigError,
)
from cdriver.imex.names import dns_names, domain_hash
from cdriver.imex.settings import ImexSettings

#: The 33 keys of the daemon config, in file order, with their rendered values.
EXPECTED = [
    ("LOG_LEVEL", "4"),
    ("LOG_FILE_NAME", ""),
    ("STATS_FILE_NAME", "/var/log/nvidia-imex-stats.log"),
    ("LOG_APPEND_TO_LOG", "0"),
    ("LOG_FILE_MAX_SIZE", "1024"),
    ("LOG_MAX_ROTATE_COUNT", "10"),
    ("LOG_USE_SYSLOG", "0"),
    ("DAEMONIZE", "0"),
    ("BIND_INTERFACE_IP", ""),
    ("SERVER_PORT", "50000"),
    ("IMEX_NODE_CONFIG_FILE", "/imexd/nodes.cfg"),
    ("NETWORK_INTERFACE", ""),
    ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
    ("IMEX_ENABLE_AUTH_ENCRYPTION", "0"),
    ("IMEX_AUTH_ENCRYPTION_MODE", "SSL_TLS"),
    ("IMEX_AUTH_SOURCE", ""),
    ("IMEX_SERVER_KEY", ""),
    ("IMEX_SERVER_CERT", ""),
    ("IMEX_SERVER_CERT_AUTH", ""),
    ("IMEX_CLIENT_KEY", ""),
    ("IMEX_CLIENT_CERT", ""),
    ("IMEX_CLIENT_CERT_AUTH", ""),
    ("IMEX_SECURITY_TARGET_OVERRIDE", ""),
    ("IMEX_GSS_SERVICE_NAME", "host"),
    ("IMEX_GSS_TIMEOUT_SEC", "30"),
    ("IMEX_GSS_RETRY_INTERVAL_SEC", "5"),
    ("IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC", "-1"),
    ("IMEX_GSS_SHUTDOWN_ON_FAILURE", "0"),
    ("IMEX_CMD_ENABLED", "1"),
    ("IMEX_CMD_BIND_INTERFACE_IP", "10.1.2.3"),
    ("IMEX_CMD_PORT", "50005"),
    ("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
    ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1"),
]


def render(template: str | None = None, **kw) -> str:
    args = {"nodes_config_file": IMEXD_NODES_CONFIG, "bind_ip": "10.1.2.3"}
    args.update(kw)
    return config.render_config(config.load_template() if template is None else template, **args)


def test_packaged_template_renders_every_key_in_order():
    text = render()
    values = config.parse_config(text)
    assert list(values.items()) == EXPECTED


def test_render_sets_unix_socket_and_ports():
    values = config.parse_config(
        render(cmd_unix_socket="/etc/nvidia-imex/imex_ctrl.sock", server_port=41000, cmd_port=41005)
    )
    assert values["IMEX_CMD_UNIX_DOMAIN_PATH"] == "/etc/nvidia-imex/imex_ctrl.sock"
    assert values["SERVER_PORT"] == "41000"
    assert values["IMEX_CMD_PORT"] == "41005"
    cfg = ImexConfig.from_values(values)
    assert (cfg.server_port, cfg.cmd_port, cfg.cmd_enabled) == (41000, 41005, True)
    assert cfg.cmd_bind_ip == "10.1.2.3"
    assert cfg.node_config_file == IMEXD_NODES_CONFIG


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"bind_ip": "not-an-ip"}, "IMEX_CMD_BIND_INTERFACE_IP='not-an-ip'"),
        ({"bind_ip": ""}, "IMEX_CMD_BIND_INTERFACE_IP=''"),
        ({"nodes_config_file": "nodes.cfg"}, "absolute path"),
        ({"nodes_config_file": "/imexd/nodes.cfg\nDAEMONIZE=1"}, "single line"),
        ({"cmd_unix_socket": "relative.sock"}, "absolute path"),
        ({"server_port": 0}, "SERVER_PORT=0"),
        ({"cmd_port": 70000}, "IMEX_CMD_PORT=70000"),
    ],
)
def test_render_rejects_bad_inputs(kw, fragment):
    with pytest.raises(ImexConfigError, match=None) as err:
        render(**kw)
    assert fragment in str(err.value)


def test_strict_undefined_names_the_variable():
    with pytest.raises(ImexConfigError) as err:
        config.render_config("SERVER_PORT={{ port_typo }}\n", "/imexd/nodes.cfg", "10.0.0.1")
    assert "port_typo" in str(err.value)


def test_template_syntax_error_names_line():
    template = "LOG_LEVEL=4\nSERVER_PORT={{ server_port \n"
    with pytest.raises(ImexConfigError) as err:
        config.render_config(template, "/imexd/nodes.cfg", "10.0.0.1")
    assert "line 2" in str(err.value)


def test_template_must_keep_supervision_keys():
    template = config.load_template().replace("DAEMONIZE=0", "DAEMONIZE=1")
    with pytest.raises(ImexConfigError) as err:
        config.render_config(template, "/imexd/nodes.cfg", "10.0.0.1")
    assert "DAEMONIZE" in str(err.value)


def test_upstream_style_template_renders_with_its_fields():
    """A domain directory prepared by the upstream plugin holds its daemon's template."""
    template = ("DAEMONIZE=0\nLOG_FILE_NAME=\nIMEX_CMD_ENABLED=1\nSERVER_PORT=50000\n"
                "IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}\n"
                "IMEX_CMD_BIND_INTERFACE_IP={{.IMEXCmdBindInterfaceIP}}\nIMEX_CMD_PORT=50005\n")
    values = config.parse_config(config.render_config(template, IMEXD_NODES_CONFIG, "10.1.2.3"))
    assert (values["IMEX_NODE_CONFIG_FILE"], values["IMEX_CMD_BIND_INTERFACE_IP"]) == (IMEXD_NODES_CONFIG, "10.1.2.3")


def test_unknown_upstream_field_is_named():
    with pytest.raises(ImexConfigError) as err:
        config.render_config("DAEMONIZE=0\nX={{ .PodIP }}\n", IMEXD_NODES_CONFIG, "10.1.2.3", source="t.cfg")
    assert "t.cfg: unknown field .PodIP" in str(err.value) and ".IMEXCmdBindInterfaceIP" in str(err.value)


def test_domain_template_leaves_only_the_slots_both_daemons_fill():
    """What the plugin places in a domain's directory: ports filled in, the nodes config path and
    pod IP as upstream's `{{ .Field }}` slots (its daemon renders them; so does cdriver's)."""
    text = config.domain_template(config.load_template())
    slots = sorted(line for line in text.splitlines() if "{{" in line or "{%" in line)
    assert slots == ["IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}",
                     "IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}"]
    assert list(config.parse_config(render(template=text)).items()) == EXPECTED


def test_load_template_missing_file(tmp_path):
    with pytest.raises(ImexConfigError) as err:
        config.load_template(tmp_path / "nope.cfg")
    assert "nope.cfg" in str(err.value)


def test_parse_config_tolerates_comments_blank_lines_and_spaces():
    text = "# comment\n\n   \nA=1\n  B = two words  \n#C=3\nEMPTY=\nURL=x=y\n"
    assert config.parse_config(text) == {"A": "1", "B": "two words", "EMPTY": "", "URL": "x=y"}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("A=1\nthis line is broken\n", "line 2: expected KEY=value"),
        ("A=1\n\n# c\nlower=1\n", "line 4: invalid key 'lower'"),
        ("=1\n", "line 1: invalid key ''"),
        ("A=1\nB=2\nA=3\n", "line 3: A is already set on line 1"),
    ],
)
def test_parse_config_rejects_malformed_lines(text, fragment):
    with pytest.raises(ImexConfigError) as err:
        config.parse_config(text, source="/imexd/imexd.cfg")
    assert fragment in str(err.value)
    assert str(err.value).startswith("/imexd/imexd.cfg: ")


def test_config_defaults_for_missing_keys():
    cfg = ImexConfig.from_values({})
    assert cfg.server_port == IMEX_SERVER_PORT
    assert cfg.cmd_port == IMEX_CMD_PORT
    assert cfg.cmd_enabled is True
    assert cfg.node_config_file == DEFAULT_IMEX_NODES_CONFIG
    assert cfg.bind_ip == cfg.cmd_bind_ip == cfg.cmd_unix_path == ""


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"SERVER_PORT": "abc"}, "SERVER_PORT='abc'"),
        ({"IMEX_CMD_PORT": "0"}, "IMEX_CMD_PORT='0'"),
        ({"IMEX_CMD_ENABLED": "yes"}, "IMEX_CMD_ENABLED='yes' must be 0 or 1"),
        ({"IMEX_CMD_BIND_INTERFACE_IP": "300.1.1.1"}, "not an IP address"),
        ({"IMEX_CMD_UNIX_DOMAIN_PATH": "sock"}, "absolute path"),
    ],
)
def test_config_rejects_bad_values(values, fragment):
    with pytest.raises(ImexConfigError) as err:
        ImexConfig.from_values(values, source="x.cfg")
    assert fragment in str(err.value)


def test_read_config_errors_name_the_file(tmp_path):
    with pytest.raises(ImexConfigError) as err:
        config.read_config(tmp_path / "missing.cfg")
    assert "missing.cfg" in str(err.value)
    binary = tmp_path / "binary.cfg"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ImexConfigError) as err:
        config.read_config(binary)
    assert "not UTF-8" in str(err.value)


def test_nodes_config_render_and_parse_round_trip():
    text = config.render_nodes_config(["10.0.0.1", "10.0.0.2", "compute-domain-daemon-0002"])
    assert text == "10.0.0.1\n10.0.0.2\ncompute-domain-daemon-0002\n"
    assert config.parse_nodes_config(text) == ["10.0.0.1", "10.0.0.2", "compute-domain-daemon-0002"]
    assert config.render_nodes_config([]) == ""


def test_parse_nodes_config_skips_comments_and_extra_fields():
    assert config.parse_nodes_config("# peers\n\n 10.0.0.1 \n10.0.0.2\t50000\n") == ["10.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize("hosts", [["10.0.0.1", ""], ["a b"], ["x#y"], ["10.0.0.1", "10.0.0.1"]])
def test_render_nodes_config_rejects_bad_entries(hosts):
    with pytest.raises(ImexConfigError):
        config.render_nodes_config(hosts)


def test_dns_nodes_config_lists_the_domains_names_up_to_max():
    uid = "6a1b2c3d-0000-4000-8000-00000000abcd"
    text = config.dns_nodes_config(uid, 18)
    lines = text.splitlines()
    assert lines == dns_names(uid, 18)
    assert lines[0] == f"compute-domain-daemon-{domain_hash(uid)}-0000"
    assert lines[-1] == f"compute-domain-daemon-{domain_hash(uid)}-0017"
    with pytest.raises(ImexConfigError) as err:
        config.dns_nodes_config(uid, 0)
    assert constants.ENV_MAX_NODES in str(err.value)
    with pytest.raises(ImexConfigError) as err:
        config.dns_nodes_config("", 18)
    assert constants.ENV_CD_UUID in str(err.value)


def test_write_file_atomic_writes_mode_and_content(tmp_path):
    target = tmp_path / "sub" / "imexd.cfg"
    config.write_file_atomic(target, "A=1\n")
    assert target.read_text() == "A=1\n"
    assert os.stat(target).st_mode & 0o777 == 0o644
    config.write_file_atomic(target, "A=2\n")
    assert target.read_text() == "A=2\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["imexd.cfg"]


def test_write_file_atomic_failure_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "nodes.cfg"
    target.write_text("10.0.0.1\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config.os, "replace", broken_replace)
    with pytest.raises(ImexConfigError) as err:
        config.write_file_atomic(target, "10.0.0.9\n")
    assert "previous file is unchanged" in str(err.value)
    assert target.read_text() == "10.0.0.1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["nodes.cfg"]


def test_domain_template_carries_the_tuned_settings_into_every_daemons_config():
    tuned = ImexSettings.parse({"IMEX_NODE_DISCONNECTED_GRACE_TIME": "300", "LOG_LEVEL": "3",
                                "IMEX_WAIT_FOR_QUORUM": "NONE"})
    placed = config.domain_template(config.load_template(), settings=tuned)
    values = config.parse_config(render(template=placed))
    assert (values["IMEX_NODE_DISCONNECTED_GRACE_TIME"], values["LOG_LEVEL"], values["IMEX_WAIT_FOR_QUORUM"]) == (
        "300", "3", "NONE")


def test_domain_template_refuses_a_template_that_hard_codes_a_tuned_key():
    template = config.load_template().replace("{{ node_disconnected_grace_time }}", "-1")
    tuned = ImexSettings.parse({"IMEX_NODE_DISCONNECTED_GRACE_TIME": "60"})
    with pytest.raises(ImexConfigError) as err:
        config.domain_template(template, settings=tuned, source="custom.cfg")
    assert "custom.cfg: IMEX_NODE_DISCONNECTED_GRACE_TIME is '-1' but the driver is set to '60'" in str(err.value)
    assert config.domain_template(template)  # at the defaults it is the same config


def test_render_refuses_a_tuned_key_nvidia_imex_does_not_accept():
    template = config.load_template().replace("{{ log_level }}", "7")
    with pytest.raises(ImexConfigError) as err:
        config.render_config(template, IMEXD_NODES_CONFIG, "10.1.2.3", source="/imexd/imexd.cfg.tmpl")
    assert "/imexd/imexd.cfg.tmpl: LOG_LEVEL='7' is not valid" in str(err.value)
    assert "(default 4)" in str(err.value)
