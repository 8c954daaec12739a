"""Images a real node imports into containerd before the chart is installed.

`NodeImages` names the OCI archives by image reference and says which one is the pod
sandbox (pause) image. `node_images()` builds (or finds cached) the local cluster's images
with the release builder of the checkout (`cdriver.sim.images.builder` runs it as a process)
— pause, workload and, for the driver's pods, the driver image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdriver.errors import CdriverError


class ImageError(CdriverError):
    """An image archive for real nodes could not be built or found."""


@dataclass
class NodeImages:
    sandbox: str  # the pause image reference (containerd's sandbox image)
    archives: dict[str, Path] = field(default_factory=dict)  # reference -> OCI archive
    refs: dict[str, str] = field(default_factory=dict)  # image name (cdriver, pause, workload) -> reference

    def add(self, name: str, ref: str, archive: Path) -> None:
        if not archive.is_file():
            raise ImageError(f"image archive {archive} for {ref} does not exist; build the images first")
        self.archives[ref] = archive
        self.refs[name] = ref


def node_images(driver: bool = True) -> NodeImages:
    """pause and workload, plus the driver image when `driver` (its first build takes minutes)."""
    from cdriver.sim.images.builder import build_images
    from cdriver.sim.images.refs import ImageBuildError

    names = ("pause", "workload", *(("cdriver",) if driver else ()))
    try:
        built = build_images(names)
    except ImageBuildError as e:
        raise ImageError(f"building the real nodes' images failed: {e}") from e
    images = NodeImages(sandbox=built["pause"].ref)
    for name, image in built.items():
        images.add(name, image.ref, image.archive)
    return images
