"""Images a real node imports into containerd before the chart is installed.

`NodeImages` names the OCI archives by image reference and says which one is the pod
sandbox (pause) image. `smoke_images()` builds the small busybox and pause images of
``hack/node/busybox-image.py`` (cached), enough to run pods on a real node; the driver image
comes from the image build (`make image`) and is added by whoever installs the chart.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cdriver.errors import CdriverError


class ImageError(CdriverError):
    """An image archive for real nodes could not be built or found."""


@dataclass
class NodeImages:
    sandbox: str  # the pause image reference (containerd's sandbox image)
    archives: dict[str, Path] = field(default_factory=dict)  # reference -> OCI archive

    def add(self, ref: str, archive: Path) -> None:
        if not archive.is_file():
            raise ImageError(f"image archive {archive} for {ref} does not exist; build the images first")
        self.archives[ref] = archive


def _script() -> Path:
    return Path(__file__).resolve().parents[4] / "hack" / "node" / "busybox-image.py"


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cdriver"


def parse_outputs(text: str) -> dict[str, str]:
    """`<name>=<value>` lines -> {name: value}."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def smoke_images() -> tuple[NodeImages, str]:
    """The busybox (workload) and pause images; returns them and the busybox reference."""
    script = _script()
    if not script.is_file():
        raise ImageError(f"{script} not found: real nodes run from a source checkout of cdriver")
    out_dir = _cache_root() / f"smoke-images-{hashlib.sha256(script.read_bytes()).hexdigest()[:12]}"
    marker = out_dir / "outputs"
    if not marker.is_file():
        done = subprocess.run([sys.executable, str(script), str(out_dir)], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise ImageError(f"building the smoke-test images failed: {done.stderr.strip()[-2000:]}")
        marker.write_text(done.stdout)
    found = parse_outputs(marker.read_text())
    images = NodeImages(sandbox=found["pause-ref"])
    images.add(found["pause-ref"], Path(found["pause"]))
    images.add(found["busybox-ref"], Path(found["busybox"]))
    return images, found["busybox-ref"]
