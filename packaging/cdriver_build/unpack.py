"""`python -m cdriver_build.unpack --platform P ARCHIVE DEST`: one platform's image as a root file system.

Simulated nodes run a driver image of another architecture from such a root, under emulation
(`cdriver.sim.world.emulated_driver`). Unpacks the layers of `ARCHIVE`'s image for `P` into
`DEST` (which must not exist yet) and prints ``root=<DEST>``, then, for a platform that is not
this machine's, ``emulator=<path>``: Debian's qemu user-mode emulator for it, fetched into the
cache (`cdriver_build.emulation`; nothing is installed or registered on the machine), with
``binfmt-entry=<name>`` and ``binfmt=<line>``: the binfmt_misc entry that hands the platform's
programs to it, for a user namespace's own binfmt_misc (`cdriver_build.userns`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cdriver_build import emulation, oci, platforms, userns
from cdriver_build.build import ImageBuildError


def say(msg: str) -> None:
    print(f"[unpack] {msg}", file=sys.stderr, flush=True)


@click.command("unpack", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--platform", "platform_name", required=True, metavar="OS/ARCH", help="e.g. linux/arm64")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(path_type=Path))
def command(platform_name: str, archive: Path, dest: Path) -> None:
    """Unpack ARCHIVE's image of --platform into DEST; print root= and, when emulated, emulator=."""
    try:
        (target,) = platforms.parse(platform_name)
        if dest.exists():
            raise ImageBuildError(f"{dest} exists: unpack into a new directory")
        partial = dest.with_name(dest.name + ".partial")
        partial.mkdir(parents=True)
        oci.extract_rootfs(archive, partial, target.name)
        partial.rename(dest)
        emulator = emulation.ensure_qemu(say) if target != platforms.native() else None
    except (ImageBuildError, oci.OciError, platforms.PlatformError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(f"root={dest}")
    if emulator is not None:
        click.echo(f"emulator={emulator}")
        click.echo(f"binfmt-entry={userns.ENTRY_NAME}")
        click.echo(f"binfmt={userns.registration(str(emulator.resolve()))}")


def main() -> None:
    """Module entry point."""
    command(prog_name="python -m cdriver_build.unpack")


if __name__ == "__main__":
    main()
