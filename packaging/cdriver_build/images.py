"""`python -m cdriver_build.images [NAME...]` (`make image`, `make images`, `cdriver sim images`):
build the local cluster's images without a container engine."""

from __future__ import annotations

import sys

import click

from cdriver_build.build import IMAGE_NAMES, ImageBuildError, ensure_images


@click.command("images", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("names", nargs=-1, type=click.Choice(IMAGE_NAMES))
def command(names: tuple[str, ...]) -> None:
    """Build the OCI image archives (default: all of cdriver, pause, workload), cached.

    Prints `<name>=<archive>` and `<name>-ref=<reference>` for each; load an archive into a
    containerd with `ctr -n k8s.io images import --local <archive>`. Needs root (mmdebstrap).
    """
    try:
        built = ensure_images(names or IMAGE_NAMES)
    except ImageBuildError as e:
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
