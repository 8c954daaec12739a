"""Regenerate the Python gRPC stubs in cdriver/dra/gen from the .proto files in cdriver/dra/protos.

All protos are compiled in one protoc run with a single include root, so every descriptor
has a distinct file name (``dra/v1/api.proto``, ``dra/v1beta1/api.proto``, ...) and they can
all be imported into one process. protoc writes imports relative to the include root; they
are rewritten to absolute ``cdriver.dra.gen...`` imports so the stubs work as a package.

Run: ``make protos`` (``python hack/codegen.py``; needs grpcio-tools, a development dependency).
Development only: not part of the installed package.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

from cdriver.errors import CdriverError

DRA_PACKAGE_DIR = Path(__file__).resolve().parents[1] / "cdriver" / "dra"
PROTO_ROOT = DRA_PACKAGE_DIR / "protos"
GEN_ROOT = DRA_PACKAGE_DIR / "gen"
GEN_PACKAGE = "cdriver.dra.gen"

_INIT_DOC = '"""Generated gRPC stubs; regenerate with `make protos`."""\n'
_IMPORT_RE = re.compile(r"^from ((?:[a-z_][a-z0-9_]*\.)*[a-z_][a-z0-9_]*) import (\w+_pb2) as", re.MULTILINE)


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """Every .proto below root, sorted, as paths relative to root."""
    return sorted(p.relative_to(root) for p in root.rglob("*.proto"))


def rewrite_imports(text: str, top_level: set[str]) -> str:
    """Turn ``from dra.v1 import api_pb2 as x`` into an absolute import inside GEN_PACKAGE.

    Only modules whose first component is one of our generated top-level packages are
    rewritten; imports of google.protobuf etc. stay as they are.
    """

    def repl(match: re.Match[str]) -> str:
        module = match.group(1)
        if module.split(".", 1)[0] not in top_level:
            return match.group(0)
        return f"from {GEN_PACKAGE}.{module} import {match.group(2)} as"

    return _IMPORT_RE.sub(repl, text)


def regenerate(proto_root: Path = PROTO_ROOT, out_dir: Path = GEN_ROOT) -> list[Path]:
    """Compile all protos into out_dir (replacing its content); return the written files."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CdriverError(
            "grpcio-tools is not installed; install the development extras (pip install -e '.[dev]')"
        ) from exc
    import grpc_tools

    protos = proto_files(proto_root)
    if not protos:
        raise CdriverError(f"no .proto files under {proto_root}")
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="cdriver-protoc-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            *[str(p) for p in protos],
        ]
        rc = protoc.main(args)
        if rc != 0:
            raise CdriverError(f"protoc failed with exit code {rc} for {[str(p) for p in protos]}")
        top_level = {p.parts[0] for p in protos}
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        written: list[Path] = []
        for src in sorted(Path(tmp).rglob("*.py")):
            rel = src.relative_to(tmp)
            dst = out_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(rewrite_imports(src.read_text(), top_level))
            written.append(dst)
        # Make every directory a package.
        for directory in [out_dir, *sorted(d for d in out_dir.rglob("*") if d.is_dir())]:
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text(_INIT_DOC)
                written.append(init)
    return written


def main() -> int:
    """Entry point for ``python hack/codegen.py``."""
    try:
        files = regenerate()
    except CdriverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
