"""Locate the control-plane binaries (etcd, kube-*, kubectl, helm) and the test tools (prometheus,
promtool).

They are built from the Go wrapper modules in ``hack/kube/`` by ``hack/kube/build.sh``, which
caches them under ``${XDG_CACHE_HOME:-~/.cache}/cdriver/`` and prints ``<component>=<dir>``
for each component. A warm call returns within a second; a cold one builds (many minutes).

Environment overrides (no build is run for an overridden component):
  CDRIVER_ETCD_BIN_DIR  directory holding ``etcd``
  CDRIVER_KUBE_BIN_DIR  directory holding kube-apiserver, kube-controller-manager,
                        kube-scheduler and kubectl
  CDRIVER_HELM_BIN_DIR  directory holding ``helm``
  CDRIVER_KUBE_1_33_BIN_DIR  directory holding kube-apiserver, kube-controller-manager and
                        kube-scheduler of Kubernetes 1.33 (the oldest minor cdriver is tested on)
  CDRIVER_KUBELET_BIN_DIR, CDRIVER_CONTAINERD_BIN_DIR, CDRIVER_CNI_BIN_DIR, CDRIVER_RUNC_BIN_DIR
                        the same for a real node's kubelet, containerd (+ ctr, runc shim),
                        CNI plugins and runc
  CDRIVER_PROMETHEUS_BIN_DIR  directory holding ``prometheus`` and ``promtool`` (the monitoring tests)
  CDRIVER_KUBE_BUILD_SCRIPT  path of build.sh (default: hack/kube/build.sh of the source tree)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cdriver.checkout import HACK_DIR
from cdriver.errors import CdriverError

#: The build.sh component of the default Kubernetes minor, and of the oldest one tested.
KUBE = "kube"
KUBE_OLDEST = "kube-1.33"
#: component -> the binaries it provides
COMPONENT_BINARIES: dict[str, tuple[str, ...]] = {
    "etcd": ("etcd",),
    KUBE: ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
    KUBE_OLDEST: ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    "helm": ("helm",),
    # what a real node runs (`hack/kube/build.sh node`)
    "kubelet": ("kubelet",),
    "containerd": ("containerd", "ctr", "containerd-shim-runc-v2"),
    "cni": ("bridge", "host-local", "loopback", "portmap"),
    "runc": ("runc",),
    # what the monitoring tests run (`hack/kube/build.sh prometheus`)
    "prometheus": ("prometheus", "promtool"),
}
ENV_BIN_DIR = {
    "etcd": "CDRIVER_ETCD_BIN_DIR",
    KUBE: "CDRIVER_KUBE_BIN_DIR",
    KUBE_OLDEST: "CDRIVER_KUBE_1_33_BIN_DIR",
    "helm": "CDRIVER_HELM_BIN_DIR",
    "kubelet": "CDRIVER_KUBELET_BIN_DIR",
    "containerd": "CDRIVER_CONTAINERD_BIN_DIR",
    "cni": "CDRIVER_CNI_BIN_DIR",
    "runc": "CDRIVER_RUNC_BIN_DIR",
    "prometheus": "CDRIVER_PROMETHEUS_BIN_DIR",
}
ENV_BUILD_SCRIPT = "CDRIVER_KUBE_BUILD_SCRIPT"
LOG_TAIL_LINES = 40


class BinariesError(CdriverError):
    """The control-plane binaries could not be found or built."""


@dataclass(frozen=True)
class ControlPlaneBinaries:
    """Absolute paths of the binaries a local cluster runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path


@dataclass(frozen=True)
class PrometheusBinaries:
    """Absolute paths of Prometheus and its rules/config checker."""

    prometheus: Path
    promtool: Path


def parse_build_output(text: str) -> dict[str, Path]:
    """``<component>=<dir>`` lines printed by build.sh -> {component: dir}."""
    found: dict[str, Path] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name in COMPONENT_BINARIES and value.startswith("/"):
            found[name] = Path(value)
    return found


def default_build_script() -> Path:
    """hack/kube/build.sh of the source tree this package is installed from (editable)."""
    override = os.environ.get(ENV_BUILD_SCRIPT)
    if override:
        return Path(override)
    return HACK_DIR / "kube" / "build.sh"


def check_bin_dir(component: str, directory: Path, origin: str) -> Path:
    """Return `directory` if it holds every binary of `component`, else raise naming the gap."""
    missing = [b for b in COMPONENT_BINARIES[component] if not os.access(directory / b, os.X_OK)]
    if missing:
        raise BinariesError(
            f"{origin}: {directory} lacks executable {', '.join(missing)}; point it at a directory "
            f"holding {', '.join(COMPONENT_BINARIES[component])} or unset it to build them with "
            f"hack/kube/build.sh"
        )
    return directory


def _go_hint() -> str:
    if shutil.which("go") is None:
        return (" Go was not found on PATH: install Go 1.26 or newer with access to the Go module "
                "proxy, or set " + ", ".join(ENV_BIN_DIR.values()) + " to prebuilt binaries.")
    return ""


def run_build(components: list[str], script: Path | None = None, echo: bool = True) -> dict[str, Path]:
    """Run build.sh for `components`; its progress goes to stderr, its result is parsed."""
    script = script or default_build_script()
    if not script.is_file():
        raise BinariesError(
            f"build script {script} not found: the local control plane is built from a source "
            f"checkout of cdriver (hack/kube/); set {ENV_BUILD_SCRIPT} to its build.sh or set "
            + ", ".join(ENV_BIN_DIR[c] for c in components) + " to prebuilt binaries"
        )
    found: dict[str, Path] = {}
    for component in components:
        tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        proc = subprocess.Popen(
            ["bash", str(script), component], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        output: list[str] = []
        for line in proc.stdout:
            output.append(line)
            tail.append(line.rstrip("\n"))
            if echo and not line.startswith(f"{component}="):
                sys.stderr.write(line)
                sys.stderr.flush()
        rc = proc.wait()
        if rc != 0:
            raise BinariesError(
                f"building {component} with {script} failed (exit {rc}).{_go_hint()} Last output:\n"
                + "\n".join(tail)
            )
        result = parse_build_output("".join(output))
        if component not in result:
            raise BinariesError(f"{script} {component} printed no '{component}=<dir>' line")
        found[component] = check_bin_dir(component, result[component], f"{script} {component}")
    return found


def component_dirs(components: tuple[str, ...] = ("etcd", "kube"), echo: bool = True) -> dict[str, Path]:
    """Directory of each component: from its env override, else from build.sh (cached)."""
    dirs: dict[str, Path] = {}
    to_build: list[str] = []
    for component in components:
        override = os.environ.get(ENV_BIN_DIR[component])
        if override:
            dirs[component] = check_bin_dir(component, Path(override), ENV_BIN_DIR[component])
        else:
            to_build.append(component)
    if to_build:
        dirs.update(run_build(to_build, echo=echo))
    return dirs


def control_plane_binaries(echo: bool = True, kube: str = KUBE) -> ControlPlaneBinaries:
    """Paths of etcd and the Kubernetes binaries, building them on first use.

    ``kube``: `KUBE` (the default minor) or `KUBE_OLDEST`; kubectl is always the default one's."""
    dirs = component_dirs(tuple(dict.fromkeys(("etcd", KUBE, kube))), echo=echo)
    return ControlPlaneBinaries(
        etcd=dirs["etcd"] / "etcd",
        kube_apiserver=dirs[kube] / "kube-apiserver",
        kube_controller_manager=dirs[kube] / "kube-controller-manager",
        kube_scheduler=dirs[kube] / "kube-scheduler",
        kubectl=dirs[KUBE] / "kubectl",
    )


def helm_binary(echo: bool = True) -> Path:
    """Path of the helm binary, building it on first use."""
    return component_dirs(("helm",), echo=echo)["helm"] / "helm"


def prometheus_binaries(echo: bool = True) -> PrometheusBinaries:
    """Paths of prometheus and promtool, building them on first use."""
    directory = component_dirs(("prometheus",), echo=echo)["prometheus"]
    return PrometheusBinaries(prometheus=directory / "prometheus", promtool=directory / "promtool")
