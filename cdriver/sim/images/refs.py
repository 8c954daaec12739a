"""The references the local cluster's images are imported under.

The release builder (packaging/cdriver_build) builds the images under these names; scenarios
and real nodes refer to them without building anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cdriver
from cdriver.errors import CdriverError

IMAGE_NAMES = ("cdriver", "pause", "workload")
REGISTRY = "localhost"
PAUSE_VERSION = "1.0"
WORKLOAD_VERSION = "1.0"


class ImageBuildError(CdriverError):
    """An image could not be built (or is not one of the local cluster's images)."""


@dataclass(frozen=True)
class ImageArchive:
    """A finished image archive: its name, the reference it is imported under, the archive."""

    name: str
    ref: str
    archive: Path

    def lines(self) -> list[str]:
        """``<name>=<path>`` and ``<name>-ref=<ref>``: what the builder and `cdriver sim images` print."""
        return [f"{self.name}={self.archive}", f"{self.name}-ref={self.ref}"]


def image_ref(name: str) -> str:
    """The reference an image is imported under."""
    tags = {"cdriver": f"v{cdriver.__version__}", "pause": PAUSE_VERSION, "workload": WORKLOAD_VERSION}
    if name not in tags:
        raise ImageBuildError(f"unknown image {name!r}: choose from {', '.join(IMAGE_NAMES)}")
    return f"{REGISTRY}/{name}:{tags[name]}"
