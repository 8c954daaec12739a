"""`python -m cdriver_build.images [NAME...]` (`make image`, `make images`, `cdriver sim images`):
build the local cluster's images without a container engine."""

from __future__ import annotations

import sys

import click

from cdriver_build import platforms
from cdriver_build.build import IMAGE_NAMES, ImageBuildError, ensure_images


@click.command("images", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("names", nargs=-1, type=click.Choice(IMAGE_NAMES))
@click.option("--platform", "platform_list", default=None, metavar="LIST",
              help="the driver image's platforms, e.g. linux/amd64,linux/arm64 or all (default: this "
                   "machine's; two make one image index)")
def command(names: tuple[str, ...], platform_list: str | None) -> None:
    """Build the OCI image archives (default: all of cdriver, pause, workload), cached.

    With `--platform linux/amd64,linux/arm64` the driver image is one image index holding an
    image per platform, each over the bundle of its own architecture (another architecture's is
    packaged under emulation). The pause and workload images are this machine's.

    Prints `<name>=<archive>` and `<name>-ref=<reference>` for each; load an archive into a
    containerd with `ctr -n k8s.io images import --local <archive>`. Needs root (mmdebstrap).
    """
    try:
        targets = platforms.parse(platform_list) if platform_list else None
        built = ensure_images(names or IMAGE_NAMES, targets=targets)
    except (ImageBuildError, platforms.PlatformError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    for image in built.values():
        for line in image.lines():
            click.echo(line)


def main() -> None:
    """Module entry point."""
    command(prog_name="python -m cdriver_build.images")


if __name__ == "__main__":
    main()
