"""Which platforms of the driver image the image tests build and check."""

from __future__ import annotations

import os


def image_platforms() -> list[str]:
    """The driver image's platforms the image tests build and check: `CDRIVER_IMAGE_PLATFORMS`
    (`make test` and `make image-test` set both of the image's), else this machine's alone (a
    pytest run without make skips the minutes an arm64 bundle takes to package under emulation)."""
    from cdriver_build import platforms
    chosen = os.environ.get("CDRIVER_IMAGE_PLATFORMS", "").strip()
    return [p.name for p in (platforms.parse(chosen) if chosen else [platforms.native()])]
