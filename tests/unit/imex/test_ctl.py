"""nvidia-imex-ctl invocation and interpretation of its answers."""

from __future__ import annotations

import pytest

from cdriver.imex import ctl
from cdriver.imex.ctl import ImexCtlError, ProbeResult


def test_argv_with_config():
    assert ctl.ctl_argv("nvidia-imex-ctl", ["-q"], config_path="/imexd/imexd.cfg") == [
        "nvidia-imex-ctl", "-c", "/imexd/imexd.cfg", "-q",
    ]


def test_argv_with_unix_socket_uses_single_token_form():
    argv = ctl.ctl_argv("nvidia-imex-ctl", ["-q"], unix_socket="/etc/nvidia-imex/imex_ctrl.sock",
                        prefix=["chroot", "/driver-root"])
    assert argv == ["chroot", "/driver-root", "nvidia-imex-ctl", "-q", "--u=/etc/nvidia-imex/imex_ctrl.sock"]


def test_argv_rejects_both_targets():
    with pytest.raises(ValueError):
        ctl.ctl_argv("x", ["-q"], config_path="/a", unix_socket="/b")


@pytest.mark.parametrize(
    "rc, stdout, ready",
    [
        (0, "READY\n", True),
        (0, "READY", True),
        (0, "  READY \n", True),
        (0, "NOT READY\n", False),
        (0, "READY\nextra\n", False),
        (0, "ready\n", False),
        (0, "", False),
        (1, "READY\n", False),
        (ctl.RC_TIMEOUT, "READY\n", False),
    ],
)
def test_interpret_probe(rc, stdout, ready):
    assert ctl.interpret_probe(rc, stdout) is ready


def test_describe_names_command_exit_and_output():
    result = ProbeResult(False, "cannot reach daemon\n", 1, ("nvidia-imex-ctl", "-c", "/imexd/imexd.cfg", "-q"))
    text = result.describe()
    assert "nvidia-imex-ctl -c /imexd/imexd.cfg -q" in text
    assert "exited 1" in text
    assert "cannot reach daemon" in text
    assert "timed out" in ProbeResult(False, "no answer within 5s", ctl.RC_TIMEOUT, ("x",)).describe()
    assert "want 'READY'" in ProbeResult(False, "STARTING\n", 0, ("x",)).describe()


def test_probe_missing_binary_is_not_ready(tmp_path):
    result = ctl.probe_ready(str(tmp_path / "nvidia-imex-ctl"), config_path="/imexd/imexd.cfg")
    assert not result.ready
    assert result.returncode == ctl.RC_NOT_FOUND
    assert "not found" in result.output


def test_query_missing_binary_raises(tmp_path):
    with pytest.raises(ImexCtlError) as err:
        ctl.query_domain(str(tmp_path / "nvidia-imex-ctl"), config_path="/imexd/imexd.cfg")
    assert "exited 127" in str(err.value)


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ([], "expected a JSON object"),
        ({"nodes": {}}, "'status'"),
        ({"status": "UP", "nodes": []}, "'nodes'"),
        ({"status": "UP", "nodes": {"0": "READY"}}, "'nodes'"),
    ],
)
def test_domain_document_shape_is_checked(doc, fragment):
    with pytest.raises(ImexCtlError) as err:
        ctl.parse_domain_document(doc)
    assert fragment in str(err.value)


def test_find_ctl_looks_in_driver_root_bin_dirs(tmp_path):
    assert ctl.find_ctl(str(tmp_path)) is None
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    target = tmp_path / "usr" / "bin" / "nvidia-imex-ctl"
    target.write_text("#!/bin/sh\n")
    assert ctl.find_ctl(str(tmp_path)) == str(target)
