"""Pure parts of the local control plane: command lines, kubeconfig, ports, log tails."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from cdriver.sim.controlplane import cluster, pki

PORTS = cluster.Ports(etcd_client=2379, etcd_peer=2380, apiserver=6443, controller_manager=10257,
                      scheduler=10259)


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)


def test_apiserver_flags_wire_etcd_pki_and_rbac(tmp_path: Path) -> None:
    layout = cluster.Layout(tmp_path)
    flags = _flags(cluster.apiserver_args(Path("/bin/kube-apiserver"), layout, PORTS))
    files = pki.PKIFiles(layout.pki_dir)
    assert flags["etcd-servers"] == "http://127.0.0.1:2379"
    assert flags["secure-port"] == "6443" and flags["bind-address"] == "127.0.0.1"
    assert flags["advertise-address"] == "127.0.0.1" and flags["endpoint-reconciler-type"] == "none"
    assert flags["authorization-mode"] == "Node,RBAC"  # real kubelets act as system:node:<name>
    assert flags["enable-admission-plugins"] == "NodeRestriction"
    assert "egress-selector-config-file" not in flags
    assert flags["client-ca-file"] == str(files.ca_cert)
    assert flags["service-account-signing-key-file"] == str(files.sa_key)
    assert flags["service-account-key-file"] == str(files.sa_pub)
    assert flags["kubelet-certificate-authority"] == str(files.ca_cert)
    assert flags["kubelet-client-certificate"] == str(files.kubelet_client_cert)
    assert flags["kubelet-preferred-address-types"] == "InternalIP"


def test_apiserver_sends_kubelet_traffic_through_the_egress_proxy_when_given(tmp_path: Path) -> None:
    """Real nodes' addresses live in their own network namespaces: only the proxy reaches them."""
    egress = tmp_path / "egress.yaml"
    flags = _flags(cluster.apiserver_args(Path("/bin/kube-apiserver"), cluster.Layout(tmp_path), PORTS, egress))
    assert flags["egress-selector-config-file"] == str(egress)
    config = cluster.egress_config(tmp_path / "egress.sock")
    assert config["kind"] == "EgressSelectorConfiguration"
    [selection] = config["egressSelections"]
    assert selection["name"] == "cluster"
    assert selection["connection"] == {"proxyProtocol": "HTTPConnect",
                                       "transport": {"uds": {"udsName": str(tmp_path / "egress.sock")}}}


def test_controller_manager_keeps_node_lifecycle_on(tmp_path: Path) -> None:
    flags = _flags(cluster.controller_manager_args(Path("/kcm"), cluster.Layout(tmp_path), PORTS))
    assert flags["controllers"] == "*"
    assert flags["leader-elect"] == "false"
    assert flags["kubeconfig"] == str(tmp_path / "admin.kubeconfig")


def test_etcd_is_a_single_loopback_member(tmp_path: Path) -> None:
    flags = _flags(cluster.etcd_args(Path("/etcd"), cluster.Layout(tmp_path), PORTS))
    assert flags["listen-client-urls"] == "http://127.0.0.1:2379"
    assert flags["initial-cluster"] == "node0=http://127.0.0.1:2380"
    assert flags["data-dir"] == str(tmp_path / "etcd")
    assert flags["unsafe-no-fsync"] == "true"


def test_kubeconfig_embeds_credentials(tmp_path: Path) -> None:
    files = pki.write_pki(tmp_path / "pki")
    cfg = cluster.kubeconfig_dict("https://127.0.0.1:6443", files)
    assert cfg["current-context"] == cluster.CONTEXT_NAME
    entry = cfg["clusters"][0]["cluster"]
    assert entry["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(entry["certificate-authority-data"]) == files.ca_cert.read_bytes()
    user = cfg["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == files.admin_key.read_bytes()


def test_pick_ports_gives_five_distinct_ports() -> None:
    ports = cluster.pick_ports()
    values = list(ports.__dict__.values())
    assert len(set(values)) == 5 and all(1024 <= p <= 65535 for p in values)


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert cluster.tail_lines(path, 3) == "line 97\nline 98\nline 99"
    assert cluster.tail_lines(tmp_path / "missing.log") == ""


def test_read_state_without_cluster_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(cluster.ClusterError, match=str(tmp_path)):
        cluster.read_state(tmp_path)


def test_non_empty_run_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    c = cluster.LocalCluster(run_dir=tmp_path, binaries=cluster.ControlPlaneBinaries(
        *(Path("/nonexistent"),) * 5))
    with pytest.raises(cluster.ClusterError, match="not empty"):
        c.start()
    assert (tmp_path / "something").exists()


def test_missing_binary_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-etcd"
    c = cluster.LocalCluster(run_dir=tmp_path / "run", binaries=cluster.ControlPlaneBinaries(
        missing, *(Path("/nonexistent"),) * 4))
    with pytest.raises(cluster.ClusterError) as err:
        c.start()
    assert f"cannot run etcd ({missing})" in str(err.value)
    assert "hack/kube/build.sh" in str(err.value)
    c.stop()
    assert not (tmp_path / "run").exists()
