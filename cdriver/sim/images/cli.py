"""`cdriver sim images [NAME...]`: build the local cluster's images (no container engine needed)."""

from __future__ import annotations

import sys

import click

from cdriver.sim.images.refs import IMAGE_NAMES, ImageBuildError


@click.command("images")
@click.argument("names", nargs=-1, type=click.Choice(IMAGE_NAMES))
@click.option("--platform", "platforms", default=None, metavar="LIST",
              help="the driver image's platforms, e.g. linux/amd64,linux/arm64 (default: this machine's; "
                   "two make one image index)")
def command(names: tuple[str, ...], platforms: str | None) -> None:
    """Build the OCI image archives (default: all of cdriver, pause, workload), cached.

    `--platform linux/amd64,linux/arm64` makes the driver image an image index holding both;
    the arm64 bundle is packaged under emulation (Debian's qemu-user-static, in a user
    namespace of its own), tens of minutes cold.

    Prints `<name>=<archive>` and `<name>-ref=<reference>` for each; load an archive into a
    containerd with `ctr -n k8s.io images import --local <archive>`. Needs root (mmdebstrap)
    and a source checkout: it runs the release builder in packaging/cdriver_build.
    """
    from cdriver.sim.images.builder import build_images

    try:
        built = build_images(names or IMAGE_NAMES, platforms=platforms)
    except ImageBuildError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    for image in built.values():
        for line in image.lines():
            click.echo(line)
