"""What the packaged executable leaves out, and what a built one holds.

`packaging/cdriver.spec` excludes `LEFT_OUT` (the simulation harness and this builder run
from a checkout, never from the executable); `bundled_modules` lists the Python modules a
built executable carries, read from its archive, so a test can hold the spec to that.
"""

from __future__ import annotations

from pathlib import Path

#: modules the executable never holds (a name covers its submodules): the local control plane
#: (all but its pid-file helper, which the host IMEX service uses), simulated nodes, whole
#: worlds, `cdriver sim images`, the local Prometheus, this builder, and the asyncio copy of the kubernetes client
LEFT_OUT = (
    "cdriver.sim.controlplane.cli",
    "cdriver.sim.controlplane.cluster",
    "cdriver.sim.controlplane.binaries",
    "cdriver.sim.controlplane.pki",
    "cdriver.sim.node",
    "cdriver.sim.world",
    "cdriver.sim.images",
    "cdriver.sim.monitoring",
    "cdriver_build",
    "kubernetes.aio",
)


def left_out(module: str) -> bool:
    """True if `module` is one the executable does not hold."""
    return any(module == name or module.startswith(name + ".") for name in LEFT_OUT)


def bundled_modules(executable: Path) -> list[str]:
    """The Python modules in a built executable's archive (its embedded PYZ), sorted."""
    from PyInstaller.archive.readers import PKG_ITEM_PYZ, CArchiveReader

    archive = CArchiveReader(str(executable))
    modules: set[str] = set()
    for name, entry in archive.toc.items():
        if entry[-1] == PKG_ITEM_PYZ:  # the byte-compiled modules
            modules |= set(archive.open_embedded_archive(name).toc)
    return sorted(modules)
