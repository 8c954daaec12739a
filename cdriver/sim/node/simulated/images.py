"""What a simulated node provides for a container image.

Simulated nodes run a container's command as a host process and ignore its image, so a
command must be on the machine. An `ImageContent` says what an image would have brought:
directories put first on the container's PATH (its executables) and files or directories
bound read-only at fixed container paths (e.g. ``/templates`` a program reads). A node is
given a list of them; a container whose image matches none runs as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cdriver.sim.node.simulated.volumes import BindMount


@dataclass(frozen=True)
class ImageContent:
    """The executables and files of one image repository (any tag or digest)."""

    #: image name without tag or digest, e.g. "registry.example/driver"
    repository: str
    #: machine directories put first on the container's PATH
    path: tuple[str, ...] = ()
    #: (container path, machine path) pairs bound read-only into the container
    files: tuple[tuple[str, str], ...] = ()

    def mounts(self) -> list[BindMount]:
        return [BindMount(source, target, read_only=True) for target, source in self.files]


def image_repository(image: str) -> str:
    """`image` without its digest (``@sha256:...``) and tag (``:v1``; a registry port is kept)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def find_image(images: Iterable[ImageContent], image: str) -> ImageContent | None:
    """The content registered for `image`'s repository, if any."""
    repository = image_repository(image)
    return next((content for content in images if content.repository == repository), None)
