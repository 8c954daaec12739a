"""`python -m cdriver_build.binary [DIR]` (`make binary`): the packaged executable in DIR.

The bundle comes from the cache the driver image is built from (`ensure_bundle`), so
pyinstaller runs once per content of the sources, whichever of the two asks first.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cdriver_build.build import ImageBuildError, install_bundle


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print(f"usage: python -m cdriver_build.binary [DIR] (default dist), not {' '.join(args)}",
              file=sys.stderr)
        return 2
    dest = Path(args[0] if args else "dist")
    try:
        exe = install_bundle(dest, lambda msg: print(f"[binary] {msg}", file=sys.stderr))
    except ImageBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"built {exe} -> {exe.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
