"""OCI archives written without a container engine: digests, documents, layer contents, validation."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from cdriver_build import oci


def sha256_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def small_image(tmp: Path, ref: str = "localhost/demo:v1") -> tuple[Path, oci.Layer]:
    tool = tmp / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    tool.chmod(0o750)
    layer = oci.write_layer([oci.Entry.host_file("usr/bin/tool", tool), oci.Entry.file("etc/motd", b"hello\n"),
                             oci.Entry.symlink("bin/t", "../usr/bin/tool")], tmp / "layer.tar", "test layer")
    archive = tmp / "demo.tar"
    oci.write_archive(archive, ref, oci.ImageConfig(entrypoint=["/usr/bin/tool"], cmd=["--x"],
                                                    labels={"k": "v"}), [layer])
    return archive, layer


def archive_files(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def test_layer_holds_entries_with_parents_fixed_owner_and_mtime(tmp_path: Path) -> None:
    _, layer = small_image(tmp_path)
    with tarfile.open(layer.path) as tar:
        members = {m.name: m for m in tar}
        assert list(members) == sorted(members), "parents come before children"
        assert set(members) == {"bin", "bin/t", "etc", "etc/motd", "usr", "usr/bin", "usr/bin/tool"}
        assert members["usr"].isdir() and members["usr"].mode == 0o755
        assert members["usr/bin/tool"].mode == 0o750
        assert tar.extractfile("usr/bin/tool").read() == b"#!/bin/sh\necho hi\n"  # type: ignore[union-attr]
        assert members["bin/t"].issym() and members["bin/t"].linkname == "../usr/bin/tool"
        assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, oci.EPOCH)}
    assert layer.descriptor.digest == sha256_file(layer.path)
    assert layer.descriptor.size == layer.path.stat().st_size
    assert layer.descriptor.media_type == oci.MEDIA_LAYER


def test_same_inputs_give_the_same_digests(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = small_image(tmp_path / "a")
    second, _ = small_image(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def test_archive_documents_reference_each_other_by_digest(tmp_path: Path) -> None:
    archive, layer = small_image(tmp_path)
    files = archive_files(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2 and index["mediaType"] == oci.MEDIA_INDEX
    [entry] = index["manifests"]
    assert entry["mediaType"] == oci.MEDIA_MANIFEST
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert entry["annotations"] == {"io.containerd.image.name": "localhost/demo:v1",
                                    "org.opencontainers.image.ref.name": "v1"}
    manifest_bytes = files["blobs/" + entry["digest"].replace(":", "/")]
    assert entry["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == oci.MEDIA_MANIFEST
    assert manifest["layers"] == [{"mediaType": oci.MEDIA_LAYER, "digest": layer.descriptor.digest,
                                   "size": layer.descriptor.size}]
    assert manifest["config"]["mediaType"] == oci.MEDIA_CONFIG
    config = json.loads(files["blobs/" + manifest["config"]["digest"].replace(":", "/")])
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer.descriptor.digest]}
    assert config["config"]["Entrypoint"] == ["/usr/bin/tool"]
    assert config["config"]["Cmd"] == ["--x"]
    assert config["config"]["Labels"] == {"k": "v"}
    assert f"PATH={oci.DEFAULT_PATH}" in config["config"]["Env"]
    assert [h["created_by"] for h in config["history"]] == ["test layer"]


def test_read_archive_accepts_what_write_archive_wrote(tmp_path: Path) -> None:
    archive, layer = small_image(tmp_path, "localhost:5000/team/demo:1.2.3")
    image = oci.read_archive(archive)
    assert (image.ref, image.tag) == ("localhost:5000/team/demo:1.2.3", "1.2.3")
    assert image.layer_digests == [layer.descriptor.digest]
    names = {m.name for m in oci.layer_members(archive, layer.descriptor.digest)}
    assert "usr/bin/tool" in names


def _rewrite_member(archive: Path, out: Path, match: str, data: bytes) -> None:
    with tarfile.open(archive) as src, tarfile.open(out, "w") as dst:
        for m in src:
            f = src.extractfile(m) if m.isfile() else None
            content = f.read() if f else b""
            if match in m.name:
                content = data
                m.size = len(data)
            dst.addfile(m, io.BytesIO(content) if m.isfile() else None)


def test_read_archive_names_a_corrupt_blob(tmp_path: Path) -> None:
    archive, layer = small_image(tmp_path)
    bad = tmp_path / "bad.tar"
    _rewrite_member(archive, bad, layer.descriptor.digest.split(":")[1], b"not the layer")
    with pytest.raises(oci.OciError, match="does not match its digest"):
        oci.read_archive(bad)


def test_read_archive_rejects_an_index_without_a_full_reference(tmp_path: Path) -> None:
    archive, _ = small_image(tmp_path)
    index = json.loads(archive_files(archive)["index.json"])
    del index["manifests"][0]["annotations"]["io.containerd.image.name"]
    bad = tmp_path / "bad.tar"
    _rewrite_member(archive, bad, "index.json", json.dumps(index).encode())
    with pytest.raises(oci.OciError, match="image reference"):
        oci.read_archive(bad)


@pytest.mark.parametrize("ref", ["cdriver", "localhost/CDriver:v1", "localhost/cdriver:", "localhost/cdriver:v 1"])
def test_bad_references_are_refused_with_the_expected_form(ref: str, tmp_path: Path) -> None:
    with pytest.raises(oci.OciError, match="<lowercase name>:<tag>"):
        oci.split_ref(ref)


def test_split_ref_keeps_a_registry_port() -> None:
    assert oci.split_ref("localhost:5000/cdriver:v0.1.0") == ("localhost:5000/cdriver", "v0.1.0")
    assert oci.split_ref("localhost/pause:1.0") == ("localhost/pause", "1.0")


def test_layer_paths_must_stay_below_the_root(tmp_path: Path) -> None:
    with pytest.raises(oci.OciError, match="below the image root"):
        oci.write_layer([oci.Entry.file("../etc/passwd", b"x")], tmp_path / "l.tar", "x")
    with pytest.raises(oci.OciError, match="given twice"):
        oci.write_layer([oci.Entry.file("a", b"1"), oci.Entry.file("/a", b"2")], tmp_path / "l.tar", "x")


def test_rewrite_layer_drops_devices_and_dev_contents_and_cleans_names(tmp_path: Path) -> None:
    source = io.BytesIO()
    with tarfile.open(fileobj=source, mode="w") as tar:
        for name, kind in (("./", tarfile.DIRTYPE), ("./dev/", tarfile.DIRTYPE), ("./dev/null", tarfile.CHRTYPE),
                           ("./dev/fd", tarfile.SYMTYPE), ("./etc/", tarfile.DIRTYPE),
                           ("./etc/hostname", tarfile.REGTYPE), ("./run/fifo", tarfile.FIFOTYPE),
                           ("./usr/bin/sh2", tarfile.LNKTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mtime = 12345
            data = b"box\n" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            if kind == tarfile.SYMTYPE:
                info.linkname = "/proc/self/fd"
            if kind == tarfile.LNKTYPE:
                info.linkname = "./etc/hostname"
            tar.addfile(info, io.BytesIO(data))
    source.seek(0)
    layer = oci.rewrite_layer(source, tmp_path / "base.tar", "base", drop=["dev"])
    with tarfile.open(layer.path) as tar:
        members = {m.name: m for m in tar}
        assert set(members) == {"dev", "etc", "etc/hostname", "usr/bin/sh2"}
        assert members["usr/bin/sh2"].islnk() and members["usr/bin/sh2"].linkname == "etc/hostname"
        assert {m.mtime for m in members.values()} == {oci.EPOCH}
        assert tar.extractfile("etc/hostname").read() == b"box\n"  # type: ignore[union-attr]
    assert layer.descriptor.digest == sha256_file(layer.path)


def test_tree_entries_copy_a_directory_like_copy_does(tmp_path: Path) -> None:
    src = tmp_path / "bundle"
    (src / "lib").mkdir(parents=True)
    (src / "cdriver").write_bytes(b"\x7fELF")
    (src / "cdriver").chmod(0o755)
    (src / "lib" / "libx.so").write_bytes(b"lib")
    (src / "lib" / "libx.so.1").symlink_to("libx.so")
    entries = {e.path: e for e in oci.tree_entries(src, "/opt/cdriver")}
    assert set(entries) == {"/opt/cdriver", "/opt/cdriver/cdriver", "/opt/cdriver/lib", "/opt/cdriver/lib/libx.so",
                            "/opt/cdriver/lib/libx.so.1"}
    assert entries["/opt/cdriver/cdriver"].mode == 0o755
    assert entries["/opt/cdriver/lib/libx.so.1"].kind == "symlink"
    assert entries["/opt/cdriver/lib/libx.so.1"].target == "libx.so"


def test_extract_rootfs_unpacks_layers_in_order(tmp_path: Path) -> None:
    first = oci.write_layer([oci.Entry.file("etc/motd", b"old\n"), oci.Entry.file("etc/keep", b"k")],
                            tmp_path / "1.tar", "one")
    second = oci.write_layer([oci.Entry.file("etc/motd", b"new\n")], tmp_path / "2.tar", "two")
    archive = tmp_path / "img.tar"
    oci.write_archive(archive, "localhost/img:1", oci.ImageConfig(), [first, second])
    root = tmp_path / "root"
    oci.extract_rootfs(archive, root)
    assert (root / "etc" / "motd").read_text() == "new\n"
    assert (root / "etc" / "keep").read_text() == "k"


def two_platform_image(tmp: Path, ref: str = "localhost/demo:v2") -> tuple[Path, dict[str, oci.Layer]]:
    layers = {}
    for arch in ("amd64", "arm64"):
        layers[arch] = oci.write_layer([oci.Entry.file("etc/arch", arch.encode())], tmp / f"{arch}.tar", arch)
    shared = oci.write_layer([oci.Entry.file("etc/motd", b"hello\n")], tmp / "shared.tar", "shared")
    archive = tmp / "multi.tar"
    oci.write_index_archive(archive, ref, [oci.PlatformImage(arch, oci.ImageConfig(entrypoint=["x"]),
                                                             [shared, layers[arch]]) for arch in layers])
    return archive, layers


def test_a_multi_platform_archive_names_one_image_index_listing_a_manifest_per_platform(tmp_path: Path) -> None:
    archive, layers = two_platform_image(tmp_path)
    files = archive_files(archive)
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["mediaType"] == oci.MEDIA_INDEX
    assert entry["annotations"] == {"io.containerd.image.name": "localhost/demo:v2",
                                    "org.opencontainers.image.ref.name": "v2"}
    nested = json.loads(files["blobs/" + entry["digest"].replace(":", "/")])
    assert nested["mediaType"] == oci.MEDIA_INDEX
    assert [(m["mediaType"], m["platform"]) for m in nested["manifests"]] == [
        (oci.MEDIA_MANIFEST, {"architecture": "amd64", "os": "linux"}),
        (oci.MEDIA_MANIFEST, {"architecture": "arm64", "os": "linux"})]
    images = oci.read_images(archive)
    assert list(images) == ["linux/amd64", "linux/arm64"]
    for arch, layer in layers.items():
        image = images[f"linux/{arch}"]
        assert image.ref == "localhost/demo:v2" and image.config["architecture"] == arch
        assert image.layer_digests[1] == layer.descriptor.digest
    shared_blob = "blobs/" + images["linux/amd64"].layer_digests[0].replace(":", "/")
    assert sum(1 for name in files if name == shared_blob) == 1, "a layer both images share is stored once"


def test_reading_one_platform_of_a_multi_platform_archive(tmp_path: Path) -> None:
    archive, layers = two_platform_image(tmp_path)
    assert oci.read_archive(archive, "linux/arm64").config["architecture"] == "arm64"
    with pytest.raises(oci.OciError, match="holds images for linux/amd64, linux/arm64: name the platform"):
        oci.read_archive(archive)
    with pytest.raises(oci.OciError, match="holds no linux/riscv64 image"):
        oci.read_archive(archive, "linux/riscv64")
    root = tmp_path / "root"
    oci.extract_rootfs(archive, root, "linux/arm64")
    assert (root / "etc/arch").read_text() == "arm64" and (root / "etc/motd").read_text() == "hello\n"
    single, _ = small_image(tmp_path)
    assert oci.read_archive(single, "linux/amd64").ref == "localhost/demo:v1"


def test_an_index_whose_platform_disagrees_with_its_config_is_refused(tmp_path: Path) -> None:
    archive, _ = two_platform_image(tmp_path)
    files = archive_files(archive)
    [entry] = json.loads(files["index.json"])["manifests"]
    nested = json.loads(files["blobs/" + entry["digest"].replace(":", "/")])
    nested["manifests"][1]["platform"]["architecture"] = "amd64"
    blob = oci.canonical_json(nested)
    digest = oci.sha256_digest(blob)
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        for name, data in files.items():
            if name == "index.json":
                doc = json.loads(data)
                doc["manifests"][0].update(digest=digest, size=len(blob))
                data = json.dumps(doc).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("blobs/" + digest.replace(":", "/"))
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(oci.OciError, match="disagree on the platform"):
        oci.read_images(bad)


def test_a_multi_platform_image_needs_distinct_architectures(tmp_path: Path) -> None:
    layer = oci.write_layer([oci.Entry.file("a", b"")], tmp_path / "l.tar", "l")
    image = oci.PlatformImage("amd64", oci.ImageConfig(), [layer])
    with pytest.raises(oci.OciError, match="one image per architecture"):
        oci.write_index_archive(tmp_path / "x.tar", "localhost/x:v1", [image, image])
