"""OCI image archives written without a container engine.

An archive is a tar holding an OCI image layout (``oci-layout``, ``index.json``,
``blobs/sha256/<hex>``) with one image: its manifest, its config and its layers. Layers are
stored uncompressed (``application/vnd.oci.image.layer.v1.tar``), so a layer's digest is its
diff ID. The index entry carries the full reference as ``io.containerd.image.name`` and the tag
as ``org.opencontainers.image.ref.name``, which is what ``ctr images import`` names the image by.

Every writer here is deterministic: the same inputs give byte-identical blobs (fixed mtimes,
owners, ordering), so digests are stable across builds.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from cdriver.atomic import atomic_path
from cdriver.errors import CdriverError

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
LAYOUT_VERSION = "1.0.0"
ANNOTATION_IMAGE_NAME = "io.containerd.image.name"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
#: mtime of every entry and the config's `created` (1 Jan 2000: any fixed value works)
EPOCH = 946684800
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_COPY_CHUNK = 1 << 20
_SMALL_BLOB = 4 << 20  # manifests and configs are read into memory up to this size

# [registry host[:port]/] lowercase path components, then a required tag
_REF = re.compile(r"^(?P<name>(?:[a-z0-9.-]+(?::[0-9]+)?/)?"
                  r"[a-z0-9]+(?:(?:[._-]|__)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._-]|__)[a-z0-9]+)*)*)"
                  r":(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$")


class OciError(CdriverError):
    """An image archive cannot be written or does not hold a valid image."""


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a manifest or index says about a blob."""

    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Entry:
    """One file system entry of a layer: a directory, a file (bytes or a host file) or a symlink."""

    path: str
    kind: str  # "dir", "file" or "symlink"
    mode: int = 0o755
    data: bytes | None = None
    source: Path | None = None
    target: str = ""

    @staticmethod
    def directory(path: str, mode: int = 0o755) -> Entry:
        return Entry(path, "dir", mode)

    @staticmethod
    def file(path: str, data: bytes, mode: int = 0o644) -> Entry:
        return Entry(path, "file", mode, data=data)

    @staticmethod
    def host_file(path: str, source: Path, mode: int | None = None) -> Entry:
        return Entry(path, "file", source.stat().st_mode & 0o7777 if mode is None else mode, source=source)

    @staticmethod
    def symlink(path: str, target: str) -> Entry:
        return Entry(path, "symlink", 0o777, target=target)


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config (what a container starts with)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=lambda: {"PATH": DEFAULT_PATH})
    working_dir: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Layer:
    """A written layer blob (uncompressed: digest == diff ID)."""

    path: Path
    descriptor: Descriptor
    comment: str


def split_ref(ref: str) -> tuple[str, str]:
    """``localhost/cdriver:v1`` -> (``localhost/cdriver``, ``v1``); OciError for anything else."""
    m = _REF.match(ref)
    if not m:
        raise OciError(f"image reference {ref!r} is not of the form <lowercase name>:<tag> "
                       "(e.g. localhost/cdriver:v0.1.0)")
    return m.group("name"), m.group("tag")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(doc: dict[str, Any]) -> bytes:
    """The bytes a JSON blob is stored as (sorted keys, no whitespace: stable digests)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------
# Pure documents
# --------------------------------------------------------------------------------------

def config_document(config: ImageConfig, diff_ids: list[str], history: list[str],
                    architecture: str = "amd64") -> dict[str, Any]:
    """The image config JSON (OCI image-spec `config`)."""
    runtime: dict[str, Any] = {"Env": [f"{k}={v}" for k, v in config.env.items()]}
    if config.entrypoint:
        runtime["Entrypoint"] = list(config.entrypoint)
    if config.cmd:
        runtime["Cmd"] = list(config.cmd)
    if config.working_dir:
        runtime["WorkingDir"] = config.working_dir
    if config.labels:
        runtime["Labels"] = dict(config.labels)
    created = "2000-01-01T00:00:00Z"
    return {
        "architecture": architecture,
        "os": "linux",
        "created": created,
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created": created, "created_by": h} for h in history],
    }


def manifest_document(config: Descriptor, layers: list[Descriptor]) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config.to_json(),
        "layers": [layer.to_json() for layer in layers],
    }


def index_document(manifest: Descriptor, ref: str, architecture: str = "amd64") -> dict[str, Any]:
    """The layout's index.json for one image: its manifest, named by `ref`."""
    _, tag = split_ref(ref)
    entry = manifest.to_json()
    entry["platform"] = {"architecture": architecture, "os": "linux"}
    entry["annotations"] = {ANNOTATION_IMAGE_NAME: ref, ANNOTATION_REF_NAME: tag}
    return {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [entry]}


def platform_index_document(manifests: list[tuple[Descriptor, str]]) -> dict[str, Any]:
    """An image index (a blob) listing one manifest per (descriptor, architecture): a multi-platform image."""
    entries = []
    for desc, architecture in manifests:
        entry = desc.to_json()
        entry["platform"] = {"architecture": architecture, "os": "linux"}
        entries.append(entry)
    return {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": entries}


def layout_index_document(index: Descriptor, ref: str) -> dict[str, Any]:
    """The layout's index.json for a multi-platform image: one entry, the image index blob, named by `ref`."""
    _, tag = split_ref(ref)
    entry = index.to_json()
    entry["annotations"] = {ANNOTATION_IMAGE_NAME: ref, ANNOTATION_REF_NAME: tag}
    return {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [entry]}


# --------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------

def _clean(path: str) -> str:
    """Layer member name: relative, normalised, no `..`; OciError otherwise."""
    p = PurePosixPath("/" + path.lstrip("./") if path.startswith("./") else path)
    parts = [part for part in p.parts if part not in ("/", ".")]
    if not parts or ".." in parts:
        raise OciError(f"layer path {path!r} is not a path below the image root")
    return "/".join(parts)


def _tarinfo(name: str, kind: str, mode: int, size: int = 0, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = mode
    if kind == "dir":
        info.type = tarfile.DIRTYPE
    elif kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = target
    else:
        info.type = tarfile.REGTYPE
        info.size = size
    return info


def _with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """Entries plus any missing parent directories (0755), sorted so parents come first."""
    by_path: dict[str, Entry] = {}
    for e in entries:
        name = _clean(e.path)
        if name in by_path:
            raise OciError(f"layer path /{name} is given twice")
        by_path[name] = Entry(name, e.kind, e.mode, e.data, e.source, e.target)
    for name in list(by_path):
        parent = PurePosixPath(name).parent
        while str(parent) != ".":
            by_path.setdefault(str(parent), Entry.directory(str(parent)))
            parent = parent.parent
    return [by_path[k] for k in sorted(by_path)]


class _HashingWriter(io.RawIOBase):
    """A file wrapper that hashes and counts what is written through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._out.write(data)
        self.hash.update(data)
        self.size += len(data)
        return len(data)


def _finish(path: Path, writer: _HashingWriter, comment: str) -> Layer:
    return Layer(path, Descriptor(MEDIA_LAYER, "sha256:" + writer.hash.hexdigest(), writer.size), comment)


def write_layer(entries: Iterable[Entry], path: Path, comment: str) -> Layer:
    """Write a layer tar holding `entries` (parents added) to `path`; its descriptor."""
    with open(path, "wb") as out:
        writer = _HashingWriter(out)
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for e in _with_parents(entries):
                if e.kind == "file":
                    if e.source is not None:
                        with open(e.source, "rb") as src:
                            size = e.source.stat().st_size
                            tar.addfile(_tarinfo(e.path, "file", e.mode, size), src)
                    else:
                        data = e.data or b""
                        tar.addfile(_tarinfo(e.path, "file", e.mode, len(data)), io.BytesIO(data))
                else:
                    tar.addfile(_tarinfo(e.path, e.kind, e.mode, target=e.target))
    return _finish(path, writer, comment)


def tree_entries(source: Path, dest: str) -> list[Entry]:
    """Entries that copy the directory `source` to `dest` in the image (as `COPY dir dest`)."""
    found = [Entry.directory(dest, 0o755)]
    for p in sorted(source.rglob("*")):
        rel = f"{dest.rstrip('/')}/{p.relative_to(source).as_posix()}"
        if p.is_symlink():
            found.append(Entry.symlink(rel, str(p.readlink())))
        elif p.is_dir():
            found.append(Entry.directory(rel, p.stat().st_mode & 0o7777))
        elif p.is_file():
            found.append(Entry.host_file(rel, p))
        else:
            raise OciError(f"{p}: only files, directories and symlinks can go into an image")
    return found


def rewrite_layer(source: IO[bytes], path: Path, comment: str, drop: Iterable[str] = ()) -> Layer:
    """Copy a root file system tar into a layer: clean names, fixed mtime, no device nodes.

    Entries below a path in `drop` (e.g. ``dev``: runtimes mount /dev) are left out, and so is
    every device node, FIFO or socket: an image holds files, directories and links only.
    """
    dropped = tuple(_clean(d) for d in drop)
    with open(path, "wb") as out:
        writer = _HashingWriter(out)
        with tarfile.open(fileobj=source, mode="r|*") as src, \
                tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for member in src:
                if member.name in (".", "./"):
                    continue
                name = _clean(member.name)
                if any(name.startswith(d + "/") for d in dropped):
                    continue
                if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                    continue
                info = tarfile.TarInfo(name)
                info.mode, info.uid, info.gid = member.mode, member.uid, member.gid
                info.uname, info.gname = member.uname, member.gname
                info.mtime = EPOCH
                info.type = member.type
                info.pax_headers = {k: v for k, v in member.pax_headers.items() if k.startswith("SCHILY.xattr.")}
                if member.islnk():
                    info.linkname = _clean(member.linkname)
                elif member.issym():
                    info.linkname = member.linkname
                if member.isfile():
                    info.size = member.size
                    tar.addfile(info, src.extractfile(member))
                else:
                    tar.addfile(info)
    return _finish(path, writer, comment)


# --------------------------------------------------------------------------------------
# The archive
# --------------------------------------------------------------------------------------

def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_tarinfo(name, "file", 0o644, len(data)), io.BytesIO(data))


@dataclass(frozen=True)
class PlatformImage:
    """One platform's image of a multi-platform archive: its architecture, config and layers."""

    architecture: str
    config: ImageConfig
    layers: list[Layer]


def _image_blobs(image: PlatformImage) -> list[tuple[Descriptor, bytes]]:
    """The manifest and config blobs of one image, manifest first."""
    config_blob = canonical_json(config_document(image.config, [lay.descriptor.digest for lay in image.layers],
                                                 [lay.comment for lay in image.layers], image.architecture))
    config_desc = Descriptor(MEDIA_CONFIG, sha256_digest(config_blob), len(config_blob))
    manifest_blob = canonical_json(manifest_document(config_desc, [lay.descriptor for lay in image.layers]))
    return [(Descriptor(MEDIA_MANIFEST, sha256_digest(manifest_blob), len(manifest_blob)), manifest_blob),
            (config_desc, config_blob)]


def _write_layout(path: Path, index: dict[str, Any], blobs: list[tuple[Descriptor, bytes]],
                  layers: list[Layer]) -> None:
    index_blob = json.dumps(index, indent=2).encode() + b"\n"
    with atomic_path(path) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", canonical_json({"imageLayoutVersion": LAYOUT_VERSION}))
        _add_bytes(tar, "index.json", index_blob)
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_tarinfo(d, "dir", 0o755))
        written = set()
        for desc, blob in blobs:
            if desc.digest not in written:
                _add_bytes(tar, _blob_name(desc.digest), blob)
                written.add(desc.digest)
        for lay in layers:
            if lay.descriptor.digest in written:
                continue
            written.add(lay.descriptor.digest)
            with open(lay.path, "rb") as f:
                tar.addfile(_tarinfo(_blob_name(lay.descriptor.digest), "file", 0o644, lay.descriptor.size), f)


def write_archive(path: Path, ref: str, config: ImageConfig, layers: list[Layer],
                  architecture: str = "amd64") -> Descriptor:
    """Write the OCI archive of one image to `path` (atomically); the manifest's descriptor."""
    split_ref(ref)
    blobs = _image_blobs(PlatformImage(architecture, config, layers))
    manifest_desc = blobs[0][0]
    _write_layout(path, index_document(manifest_desc, ref, architecture), blobs, layers)
    return manifest_desc


def write_index_archive(path: Path, ref: str, images: list[PlatformImage]) -> Descriptor:
    """Write the OCI archive of a multi-platform image to `path` (atomically); the image index's descriptor.

    index.json names one image index blob by `ref`; that index lists one manifest per platform,
    each with its platform, so a runtime pulls or unpacks the one for its own architecture.
    """
    split_ref(ref)
    architectures = [image.architecture for image in images]
    if not images or len(set(architectures)) != len(architectures):
        raise OciError(f"a multi-platform image needs one image per architecture, not {architectures}")
    blobs: list[tuple[Descriptor, bytes]] = []
    for image in images:
        blobs += _image_blobs(image)
    manifests = [(blobs[2 * i][0], image.architecture) for i, image in enumerate(images)]
    index_blob = canonical_json(platform_index_document(manifests))
    index_desc = Descriptor(MEDIA_INDEX, sha256_digest(index_blob), len(index_blob))
    _write_layout(path, layout_index_document(index_desc, ref), [(index_desc, index_blob), *blobs],
                  [lay for image in images for lay in image.layers])
    return index_desc


def _blob_name(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/", 1)


# --------------------------------------------------------------------------------------
# Reading an archive back (validation)
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArchivedImage:
    """What a validated archive holds."""

    ref: str
    tag: str
    manifest: dict[str, Any]
    config: dict[str, Any]
    layer_digests: list[str]


def _read_json(blobs: dict[str, bytes], desc: dict[str, Any], what: str) -> dict[str, Any]:
    digest = desc.get("digest", "")
    if digest not in blobs:
        raise OciError(f"{what} {digest} is not in blobs/")
    data = blobs[digest]
    if len(data) != desc.get("size"):
        raise OciError(f"{what} {digest}: size {len(data)} but the descriptor says {desc.get('size')}")
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise OciError(f"{what} {digest} is not a JSON object")
    return doc


def _read_blobs(path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, bytes], dict[str, int]]:
    """oci-layout, index.json, the small blobs' bytes and every blob's size (each blob checked against its digest)."""
    json_blobs: dict[str, bytes] = {}
    blob_sizes: dict[str, int] = {}
    layout = index = None
    with tarfile.open(path, "r:") as tar:
        for member in tar:
            name = _clean(member.name)
            if not member.isfile():
                continue
            f = tar.extractfile(member)
            assert f is not None
            if name == "oci-layout":
                layout = json.load(f)
            elif name == "index.json":
                index = json.load(f)
            elif name.startswith("blobs/sha256/"):
                digest = "sha256:" + name.rsplit("/", 1)[1]
                h = hashlib.sha256()
                while chunk := f.read(_COPY_CHUNK):
                    h.update(chunk)
                if "sha256:" + h.hexdigest() != digest:
                    raise OciError(f"{path}: blob {name} does not match its digest")
                blob_sizes[digest] = member.size
                if member.size <= _SMALL_BLOB:
                    f.seek(0)
                    json_blobs[digest] = f.read()
    return layout, index, json_blobs, blob_sizes


def _read_image(path: Path, entry: dict[str, Any], ref: str, tag: str, json_blobs: dict[str, bytes],
                blob_sizes: dict[str, int]) -> ArchivedImage:
    """One image of an archive from its manifest descriptor (with its platform)."""
    if entry.get("mediaType") != MEDIA_MANIFEST:
        raise OciError(f"{path}: index entry has media type {entry.get('mediaType')}, not {MEDIA_MANIFEST}")
    manifest = _read_json(json_blobs, entry, "manifest")
    if manifest.get("config", {}).get("mediaType") != MEDIA_CONFIG:
        raise OciError(f"{path}: manifest config media type is not {MEDIA_CONFIG}")
    config = _read_json(json_blobs, manifest["config"], "config")
    digests = []
    for layer in manifest.get("layers", []):
        if layer.get("mediaType") != MEDIA_LAYER:
            raise OciError(f"{path}: layer {layer.get('digest')} has media type {layer.get('mediaType')}")
        if blob_sizes.get(layer["digest"]) != layer.get("size"):
            raise OciError(f"{path}: layer {layer['digest']} missing or of the wrong size")
        digests.append(layer["digest"])
    if config.get("rootfs", {}).get("diff_ids") != digests:
        raise OciError(f"{path}: config diff_ids do not match the manifest's layers")
    platform = entry.get("platform", {})
    if platform.get("architecture") != config.get("architecture") or platform.get("os") != config.get("os"):
        raise OciError(f"{path}: index platform {platform} and config disagree on the platform")
    return ArchivedImage(ref, tag, manifest, config, digests)


def read_images(path: Path) -> dict[str, ArchivedImage]:
    """Read and validate an archive written by `write_archive` or `write_index_archive`: {platform: image}.

    Checks the layout version, that every blob's content matches its digest, that the index
    (and, for a multi-platform image, the image index it names), manifests and configs
    reference blobs that exist with the right sizes and media types, that each manifest's
    platform is its config's and appears once, and that each config's diff IDs are its
    (uncompressed) layers' digests. Platforms are named ``linux/<architecture>``. OciError names
    the flaw.
    """
    layout, index, json_blobs, blob_sizes = _read_blobs(path)
    if not layout or layout.get("imageLayoutVersion") != LAYOUT_VERSION:
        raise OciError(f"{path}: oci-layout missing or not version {LAYOUT_VERSION}")
    if not index or len(index.get("manifests", [])) != 1:
        raise OciError(f"{path}: index.json must list exactly one manifest")
    entry = index["manifests"][0]
    annotations = entry.get("annotations", {})
    ref = annotations.get(ANNOTATION_IMAGE_NAME, "")
    _, tag = split_ref(ref)
    if annotations.get(ANNOTATION_REF_NAME) != tag:
        raise OciError(f"{path}: {ANNOTATION_REF_NAME} is not the tag of {ref}")
    if entry.get("mediaType") == MEDIA_INDEX:
        entries = _read_json(json_blobs, entry, "image index").get("manifests", [])
        if not entries:
            raise OciError(f"{path}: the image index lists no manifests")
    else:
        entries = [entry]
    images: dict[str, ArchivedImage] = {}
    for e in entries:
        image = _read_image(path, e, ref, tag, json_blobs, blob_sizes)
        name = f"{image.config.get('os')}/{image.config.get('architecture')}"
        if name in images:
            raise OciError(f"{path}: the image index lists {name} twice")
        images[name] = image
    return images


def read_archive(path: Path, platform: str | None = None) -> ArchivedImage:
    """The validated image of `platform` (e.g. ``linux/arm64``) in an archive; the only one when None."""
    images = read_images(path)
    if platform is None:
        if len(images) != 1:
            raise OciError(f"{path} holds images for {', '.join(images)}: name the platform to read")
        return next(iter(images.values()))
    if platform not in images:
        raise OciError(f"{path} holds no {platform} image, only {', '.join(images)}")
    return images[platform]


def layer_members(archive: Path, digest: str) -> Iterator[tarfile.TarInfo]:
    """The members of one layer of an archive (for inspection)."""
    with tarfile.open(archive, "r:") as tar:
        blob = tar.extractfile(_blob_name(digest))
        if blob is None:
            raise OciError(f"{archive}: no blob {digest}")
        with tarfile.open(fileobj=blob, mode="r:") as layer:
            yield from layer


def extract_rootfs(archive: Path, dest: Path, platform: str | None = None) -> ArchivedImage:
    """Unpack the layers of the image (of `platform`, see `read_archive`) in order into `dest` (no
    whiteouts: the writers make none)."""
    image = read_archive(archive, platform)
    with tarfile.open(archive, "r:") as tar:
        for digest in image.layer_digests:
            blob = tar.extractfile(_blob_name(digest))
            assert blob is not None
            with tarfile.open(fileobj=blob, mode="r:") as layer:
                layer.extractall(dest, filter="fully_trusted")
    return image
