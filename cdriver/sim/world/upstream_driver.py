"""The upstream Go ComputeDomain driver, run on the simulated cluster in place of cdriver.

`hack/peer/build.sh` builds upstream's compute-domain-controller, -kubelet-plugin and
-daemon from its source tarball into the cache (``peer-<hash>/bin``, the extracted source in
``peer-<hash>/src``). A world started with ``driver="upstream"`` installs upstream's own chart
(``deployments/helm/dra-driver-nvidia-gpu``, ComputeDomain parts only) instead of cdriver's,
on the same simulated nodes: the nodes map upstream's image to the built binaries (on PATH)
and the image's files (``/templates``; the plugin's prestart check is a stand-in from
``hack/peer/``); the values point the
chart at the simulated driver root (mock NVML, ``proc/devices``, channel devices, IMEX
stand-ins).

Environment:
  CDRIVER_PEER_DIR      a finished peer build directory (skips the build script)
  CDRIVER_PEER_TARBALL  the upstream source tarball build.sh builds from
"""

from __future__ import annotations

import os
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cdriver.checkout import HACK_DIR
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.images import ImageContent

ENV_PEER_DIR = "CDRIVER_PEER_DIR"
PEER_BINARIES = ("compute-domain-controller", "compute-domain-kubelet-plugin", "compute-domain-daemon")
#: upstream chart's default image repository (the chart's appVersion is the tag)
PEER_IMAGE_REPOSITORY = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
PEER_CHART_SUBDIR = "deployments/helm/dra-driver-nvidia-gpu"
#: the image's files the binaries use, (container path, path in upstream's source tree)
PEER_IMAGE_FILES = (("/templates", "templates"),)
#: the chart's kubelet-plugin init command runs this image file; on simulated nodes it is a
#: stand-in from hack/peer/ (a simulated container's root is a private overlay of the machine's
#: filesystems, not the image's, so the image's own script is not there)
PEER_PRESTART = "/usr/bin/kubelet-plugin-prestart.sh"


class PeerError(CdriverError):
    """The upstream driver could not be built or found."""


class PeerSourceMissing(PeerError):
    """There is no upstream source tarball on this machine to build the upstream driver from."""


#: build.sh's exit status when it finds no source tarball (hack/peer/tarball.sh)
EXIT_NO_TARBALL = 4


def find_source_tarball() -> Path:
    """The upstream source tarball hack/peer/tarball.sh finds; PeerSourceMissing naming the fix."""
    script = build_script().parent / "tarball.sh"
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise PeerSourceMissing(out.stderr.strip() or f"{script} exited {out.returncode}")
    return Path(out.stdout.strip())


@dataclass(frozen=True)
class PeerBuild:
    """A finished build: binaries and the source tree they were built from."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def source(self) -> Path:
        return self.root / "src"

    @property
    def chart(self) -> Path:
        return self.source / PEER_CHART_SUBDIR

    def check(self, origin: str) -> PeerBuild:
        missing = [b for b in PEER_BINARIES if not os.access(self.bin_dir / b, os.X_OK)]
        if missing or not (self.chart / "Chart.yaml").is_file():
            raise PeerError(f"{origin}: {self.root} is not a finished peer build (missing "
                            f"{', '.join(missing) or self.chart}); run `make peer` or unset {ENV_PEER_DIR}")
        return self

    def image(self) -> ImageContent:
        """What a simulated node provides for upstream's image."""
        files = tuple((target, str(self.source / rel)) for target, rel in PEER_IMAGE_FILES)
        files += ((PEER_PRESTART, str(build_script().with_name("kubelet-plugin-prestart.sh"))),)
        return ImageContent(PEER_IMAGE_REPOSITORY, path=(str(self.bin_dir),), files=files)


def build_script() -> Path:
    return HACK_DIR / "peer" / "build.sh"


def parse_peer_line(text: str) -> Path | None:
    """The directory of build.sh's last ``peer=<dir>`` line."""
    found = None
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key == "peer" and value.startswith("/"):
            found = Path(value)
    return found


def peer_build(echo: bool = True) -> PeerBuild:
    """The peer build from CDRIVER_PEER_DIR, else from build.sh (cached after the first run)."""
    override = os.environ.get(ENV_PEER_DIR)
    if override:
        return PeerBuild(Path(override)).check(ENV_PEER_DIR)
    script = build_script()
    if not script.is_file():
        raise PeerError(f"{script} not found: the upstream driver is built from a source checkout of "
                        f"cdriver; set {ENV_PEER_DIR} to a finished build")
    tail: deque[str] = deque(maxlen=30)
    output = []
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line)
        tail.append(line.rstrip("\n"))
        if echo and not line.startswith("peer="):
            print(line, end="", flush=True)
    if proc.wait() == EXIT_NO_TARBALL:
        raise PeerSourceMissing("\n".join(tail))
    if proc.returncode != 0:
        raise PeerError(f"building the upstream driver with {script} failed (exit {proc.returncode}):\n"
                        + "\n".join(tail))
    root = parse_peer_line("".join(output))
    if root is None:
        raise PeerError(f"{script} printed no 'peer=<dir>' line")
    return PeerBuild(root).check(str(script))


def peer_local_values(driver_root: str) -> list[str]:
    """`--set` arguments for upstream's chart that only the simulated cluster needs."""
    return [
        "--set", f"nvidiaDriverRoot={driver_root}",
        # no kernel driver: channel majors come from the driver root's proc/devices (mock NVML mode)
        "--set", f"altProcDevices={driver_root}/proc/devices",
        # no container toolkit: name a hook path so the plugin does not copy one from its image
        "--set", "nvidiaCDIHookPath=/usr/bin/nvidia-cdi-hook",
        "--set", "image.pullPolicy=Never",
        # simulated pods share the machine's network: fixed metrics and health ports would collide
        "--set", "controller.metrics.enabled=false",
        "--set", "kubeletPlugin.metrics.enabled=false",
        "--set", "kubeletPlugin.containers.computeDomains.healthcheckPort=0",
    ]


def peer_helm_values(driver_root: str, imex_mode: str, feature_gates: dict[str, bool]) -> list[str]:
    """`--set` arguments for upstream's chart on simulated nodes (ComputeDomain parts only)."""
    values = [
        *peer_local_values(driver_root),
        "--set", "resources.gpus.enabled=false",
        "--set", "resources.computeDomains.enabled=true",
        "--set", f"resources.computeDomains.imex.mode={imex_mode}",
        "--set", "logVerbosity=4",
    ]
    for name, enabled in sorted(feature_gates.items()):
        values += ["--set", f"featureGates.{name}={str(enabled).lower()}"]
    return values
