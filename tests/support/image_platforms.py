"""Which platforms of the driver image the image tests build and check."""

from __future__ import annotations

import os


def image_platforms() -> list[str]:
    """The driver image's platforms the image tests build and check: `CDRIVER_IMAGE_PLATFORMS`
    (`make image-test` sets every platform), else this machine's alone, as `make test` runs them,
    because a cold arm64 bundle packaged under emulation takes tens of minutes (README)."""
    from cdriver_build import platforms
    chosen = os.environ.get("CDRIVER_IMAGE_PLATFORMS", "").strip()
    return [p.name for p in (platforms.parse(chosen) if chosen else [platforms.native()])]
