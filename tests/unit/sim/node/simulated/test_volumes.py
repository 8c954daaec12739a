"""Pod volumes on simulated nodes: node paths, content files, tokens, mounts."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import pytest

from cdriver.sim.node.simulated import volumes as vol
from cdriver.sim.node.simulated.layout import NodeLayout

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "labels": {"a": "b"}},
    "spec": {"nodeName": "n1", "serviceAccountName": "sa",
             "containers": [{"name": "main", "resources": {"limits": {"memory": "2Mi"}}}]},
}


def layout(tmp_path: Path) -> NodeLayout:
    return NodeLayout.at(tmp_path / "node").ensure()


class Tokens:
    def __init__(self, life: float = 3600.0) -> None:
        self.calls: list[tuple[str, str, str, int]] = []
        self.life = life

    def __call__(self, ns: str, sa: str, audience: str, seconds: int, pod: dict) -> tuple[str, float]:
        self.calls.append((ns, sa, audience, seconds))
        return f"token-{len(self.calls)}", self.life


def context(objects: dict[tuple[str, str], dict], tokens: Tokens) -> vol.VolumeContext:
    return vol.VolumeContext(host_ip="127.0.1.1", pod_ip="127.0.1.1", allocatable={"memory": "1Gi"},
                             get_configmap=lambda ns, n: objects.get(("cm", n)),
                             get_secret=lambda ns, n: objects.get(("secret", n)), request_token=tokens)


def test_keyed_files_all_keys_or_listed_items_with_modes() -> None:
    data = {"a": b"1", "b": b"2"}
    assert vol.keyed_files(data, None, 0o644, "v", False) == {"a": (b"1", 0o644), "b": (b"2", 0o644)}
    items = [{"key": "b", "path": "dir/b.txt", "mode": 0o600}]
    assert vol.keyed_files(data, items, 0o644, "v", False) == {"dir/b.txt": (b"2", 0o600)}
    with pytest.raises(vol.VolumeError, match="key 'zz' not found"):
        vol.keyed_files(data, [{"key": "zz", "path": "z"}], 0o644, "v", False)
    assert vol.keyed_files(data, [{"key": "zz", "path": "z"}], 0o644, "v", True) == {}


@pytest.mark.parametrize("path", ["", "/abs", "../up", "a/../../b"])
def test_item_paths_must_stay_inside_the_volume(path: str) -> None:
    with pytest.raises(vol.VolumeError, match="relative"):
        vol.check_relative(path, "volume 'v'")


def test_host_path_maps_into_the_node_root_and_honours_types(tmp_path: Path) -> None:
    lay = layout(tmp_path)
    made = vol.host_path_volume(lay, {"path": "/var/lib/thing", "type": "DirectoryOrCreate"}, "v")
    assert made == lay.root / "var/lib/thing" and made.is_dir()
    assert vol.host_path_volume(lay, {"path": "/"}, "v") == lay.root
    f = vol.host_path_volume(lay, {"path": "/etc/x.conf", "type": "FileOrCreate"}, "v")
    assert f.is_file()
    with pytest.raises(vol.VolumeError, match="is not a Socket"):
        vol.host_path_volume(lay, {"path": "/etc/x.conf", "type": "Socket"}, "v")
    with pytest.raises(vol.VolumeError, match="is not a Directory"):
        vol.host_path_volume(lay, {"path": "/missing", "type": "Directory"}, "v")
    assert vol.host_path_volume(lay, {"path": "/a/../../escape"}, "v") == lay.root / "escape"


def test_write_files_replaces_changed_and_removes_stale(tmp_path: Path) -> None:
    d = tmp_path / "vol"
    names = vol.write_files(d, {"a": (b"1", 0o644), "sub/b": (b"2", 0o400)}, set())
    assert (d / "a").read_bytes() == b"1" and stat.S_IMODE((d / "sub/b").stat().st_mode) == 0o400
    vol.write_files(d, {"a": (b"3", 0o644)}, names)
    assert (d / "a").read_bytes() == b"3" and not (d / "sub/b").exists()
    assert not [p for p in d.rglob(".*")]  # no temp files left


def test_projected_token_volume_with_ca_and_namespace_and_refresh(tmp_path: Path) -> None:
    tokens = Tokens(life=100.0)
    objects = {("cm", "kube-root-ca.crt"): {"data": {"ca.crt": "CA"}}}
    pod = {**POD, "spec": {**POD["spec"], "volumes": [{"name": "kube-api-access-x", "projected": {
        "defaultMode": 0o644, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}]}}
    volumes = vol.PodVolumes(layout(tmp_path), pod, context(objects, tokens))
    path = volumes.setup()["kube-api-access-x"]
    assert (path / "token").read_text() == "token-1"
    assert (path / "ca.crt").read_text() == "CA"
    assert (path / "namespace").read_text() == "ns"
    assert tokens.calls == [("ns", "sa", "", 3607)]
    volumes.refresh()  # token still fresh
    assert len(tokens.calls) == 1
    for state in volumes._tokens.values():
        state.refresh_at = 0  # 80 % of its life has passed
    objects[("cm", "kube-root-ca.crt")] = {"data": {"ca.crt": "CA2"}}
    volumes.refresh()
    assert (path / "token").read_text() == "token-2" and (path / "ca.crt").read_text() == "CA2"


def test_secret_and_downward_volumes(tmp_path: Path) -> None:
    objects = {("secret", "creds"): {"data": {"pw": base64.b64encode(b"s3").decode()}}}
    pod = {**POD, "spec": {**POD["spec"], "volumes": [
        {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "d", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory",
                                                 "divisor": "1Mi"}}]}},
        {"name": "e", "emptyDir": {}}]}}
    paths = vol.PodVolumes(layout(tmp_path), pod, context(objects, Tokens())).setup()
    assert (paths["s"] / "pw").read_bytes() == b"s3"
    assert stat.S_IMODE((paths["s"] / "pw").stat().st_mode) == 0o400
    assert (paths["d"] / "labels").read_text() == 'a="b"'
    assert (paths["d"] / "mem").read_text() == "2"
    assert paths["e"].is_dir() and stat.S_IMODE(paths["e"].stat().st_mode) == 0o777


def test_missing_objects_and_unsupported_types_are_named(tmp_path: Path) -> None:
    pod = {**POD, "spec": {**POD["spec"], "volumes": [{"name": "c", "configMap": {"name": "nope"}}]}}
    with pytest.raises(vol.VolumeError, match='volume \'c\': configmap "nope" not found in namespace ns'):
        vol.PodVolumes(layout(tmp_path), pod, context({}, Tokens())).setup()
    optional = {**POD, "spec": {**POD["spec"], "volumes": [{"name": "c", "configMap": {"name": "nope",
                                                                                        "optional": True}}]}}
    assert vol.PodVolumes(layout(tmp_path), optional, context({}, Tokens())).setup()["c"].is_dir()
    pvc = {**POD, "spec": {**POD["spec"], "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "x"}}]}}
    with pytest.raises(vol.VolumeError, match="persistentVolumeClaim is not supported"):
        vol.PodVolumes(layout(tmp_path), pvc, context({}, Tokens())).setup()


def test_container_mounts_resolve_sub_paths(tmp_path: Path) -> None:
    paths = {"data": tmp_path / "data"}
    paths["data"].mkdir()
    container = {"name": "main", "volumeMounts": [
        {"name": "data", "mountPath": "/srv/data", "readOnly": True},
        {"name": "data", "mountPath": "/srv/mine", "subPathExpr": "$(POD)/logs"}]}
    mounts = vol.container_mounts(container, paths, {"POD": "p1"})
    assert mounts[0] == vol.BindMount(str(paths["data"]), "/srv/data", True)
    assert mounts[1].source == str(paths["data"] / "p1/logs") and (paths["data"] / "p1/logs").is_dir()
    with pytest.raises(vol.VolumeError, match="no volume named 'x'"):
        vol.container_mounts({"name": "m", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}, paths, {})
