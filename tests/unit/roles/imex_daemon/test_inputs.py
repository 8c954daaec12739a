"""imex-daemon inputs: CDI identity, downward-API env and flags -> validated settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.imex.hosts import HOSTS_FILE
from cdriver.roles.imex_daemon.inputs import InputError, RawInputs, parse_check_settings, parse_settings

GOOD = dict(
    clique_id="00000000-0000-0000-0000-0000000000ab.0",
    cd_uid="3f2a5c1e-0000-4000-8000-000000000001",
    cd_name="cd1",
    cd_namespace="team",
    node_name="node-a",
    pod_ip="127.0.1.5",
    pod_name="computedomain-daemon-x-abcde",
    pod_namespace="nvidia-dra-driver-gpu",
    pod_uid="11111111-2222-3333-4444-555555555555",
    max_nodes="18",
)


def raw(**overrides: object) -> RawInputs:
    return RawInputs(**{**GOOD, **overrides})


def test_complete_inputs_give_default_modes_and_paths() -> None:
    s = parse_settings(raw(imexd_dir="/tmp/x/imexd"))
    assert s.max_nodes == 18
    assert s.dns_names and s.cliques
    assert s.clique_name == f"{GOOD['cd_uid']}.{GOOD['clique_id']}"
    assert s.paths.template == Path("/tmp/x/imexd/imexd.cfg.tmpl")
    assert s.paths.config == Path("/tmp/x/imexd/imexd.cfg")
    assert s.paths.nodes_config == Path("/tmp/x/imexd/nodes.cfg")
    assert s.paths.hosts_file == Path(HOSTS_FILE)


def test_missing_cd_uid_says_cdi_was_not_applied() -> None:
    with pytest.raises(InputError) as err:
        parse_settings(raw(cd_uid=""))
    msg = str(err.value)
    assert "COMPUTE_DOMAIN_UUID is empty" in msg
    assert "CDI container edits" in msg and "not applied" in msg


def test_empty_clique_needs_only_pod_identity() -> None:
    s = parse_settings(raw(clique_id="", node_name="", pod_ip="", pod_uid="", max_nodes=""))
    assert s.clique_id == ""
    assert s.max_nodes == 0


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(InputError) as err:
        parse_settings(raw(node_name="", pod_ip="10.0.0.300", max_nodes="many", pod_uid=""))
    msg = str(err.value)
    assert "NODE_NAME is empty" in msg and "spec.nodeName" in msg
    assert "POD_IP='10.0.0.300' is not an IP address" in msg
    assert "MAX_NODES_PER_IMEX_DOMAIN='many' is not an integer" in msg
    assert "POD_UID is empty" in msg


def test_zero_max_nodes_is_rejected_with_the_default_named() -> None:
    with pytest.raises(InputError, match=r"MAX_NODES_PER_IMEX_DOMAIN=0 leaves no index.*18"):
        parse_settings(raw(max_nodes="0"))


def test_bad_feature_gates_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown feature gate 'Bogus'"):
        parse_settings(raw(feature_gates="Bogus=true"))
    with pytest.raises(InputError, match="ComputeDomainCliques requires IMEXDaemonsWithDNSNames"):
        parse_settings(raw(feature_gates="IMEXDaemonsWithDNSNames=false"))


def test_legacy_ip_mode_needs_the_domain_name() -> None:
    gates = "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false,"
    s = parse_settings(raw(feature_gates=gates))
    assert not s.dns_names and not s.cliques
    with pytest.raises(InputError, match="COMPUTE_DOMAIN_NAME is empty"):
        parse_settings(raw(feature_gates=gates, cd_name=""))


def test_clique_id_must_be_a_label_value() -> None:
    with pytest.raises(InputError, match="CLIQUE_ID='bad clique' is not a valid label value"):
        parse_settings(raw(clique_id="bad clique"))


def test_check_settings_accept_an_empty_clique() -> None:
    s = parse_check_settings(RawInputs(clique_id="  ", imexd_dir="/x"))
    assert s.clique_id == ""
    assert s.paths.config == Path("/x/imexd.cfg")


def test_the_metrics_endpoint_defaults_to_8082_and_a_bad_one_is_named() -> None:
    assert (parse_settings(raw()).http_endpoint, parse_settings(raw()).metrics_path) == (":8082", "/metrics")
    assert parse_settings(raw(http_endpoint=" ")).http_endpoint == ""  # off
    with pytest.raises(InputError, match="--http-endpoint '8082'.*empty: no metrics endpoint"):
        parse_settings(raw(http_endpoint="8082"))
