#!/usr/bin/env python3
"""Build two small OCI image archives from Debian's busybox-static, for real-node smoke tests.

    hack/node/busybox-image.py OUT_DIR

writes OUT_DIR/busybox.tar (ref docker.io/cdriver/busybox:local, runs `sh`) and
OUT_DIR/pause.tar (ref docker.io/cdriver/pause:local, sleeps until TERM), and prints
`<name>=<archive>` and `<name>-ref=<ref>` lines. The .deb comes from apt (`apt-get download`);
nothing is installed. Archives are OCI image layouts that `ctr images import --local` reads.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

BUSYBOX_REF = "docker.io/cdriver/busybox:local"
PAUSE_REF = "docker.io/cdriver/pause:local"
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done"


def busybox_binary(work: Path) -> bytes:
    """The static busybox executable from Debian's package."""
    subprocess.run(["apt-get", "download", "-q", "busybox-static"], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)
    deb = next(work.glob("busybox-static_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "x")], check=True)
    return (work / "x" / "bin" / "busybox").read_bytes()


def layer(busybox: bytes) -> bytes:
    """One uncompressed tar layer: /bin/busybox plus a symlink per applet, /tmp, /etc."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "tmp", "etc", "dev", "proc", "sys"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(busybox), 0o755
        tar.addfile(info, io.BytesIO(busybox))
        for applet in ("sh", "sleep", "ls", "cat", "echo", "stat", "test", "ps", "wc", "grep", "nc", "ip",
                       "wget", "env", "id", "mount", "true", "find", "head"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    return buf.getvalue()


def blob(out: tarfile.TarFile, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def archive(path: Path, ref: str, layer_tar: bytes, entrypoint: list[str]) -> None:
    """Write an OCI image layout tar holding one image tagged `ref`."""
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    gz = gzip.compress(layer_tar, mtime=0)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"], "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    with tarfile.open(path, "w") as out:
        layout = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
        info = tarfile.TarInfo("oci-layout")
        info.size = len(layout)
        out.addfile(info, io.BytesIO(layout))
        cfg = blob(out, json.dumps(config).encode())
        lay = blob(out, gz)
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **lay}]}
        man = blob(out, json.dumps(manifest).encode())
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                 "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **man,
                                "annotations": {"io.containerd.image.name": ref,
                                                "org.opencontainers.image.ref.name": ref}}]}
        data = json.dumps(index).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        layer_tar = layer(busybox_binary(Path(tmp)))
    archive(out_dir / "busybox.tar", BUSYBOX_REF, layer_tar, ["/bin/sh"])
    archive(out_dir / "pause.tar", PAUSE_REF, layer_tar, ["/bin/sh", "-c", PAUSE_SCRIPT])
    print(f"busybox={out_dir / 'busybox.tar'}\nbusybox-ref={BUSYBOX_REF}")
    print(f"pause={out_dir / 'pause.tar'}\npause-ref={PAUSE_REF}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: busybox-image.py OUT_DIR")
    main(Path(sys.argv[1]))
