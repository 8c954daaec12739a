"""The images real nodes run: built without a container engine, valid OCI archives, and working.

Builds (or finds cached) the driver image as an image index of linux/amd64 and linux/arm64
(as `make image` does) and the pause and workload images, reads each archive back with the
validating reader (every blob against its digest, index -> image index -> manifests ->
configs -> layers), then unpacks each image and runs it in its own root file system (chroot,
private mount, PID and network namespaces). The driver image's checks run for both platforms:
the arm64 image runs under emulation, in a user namespace whose own binfmt_misc hands AArch64
programs to Debian's qemu-aarch64-static (nothing is registered on the machine). The packaged
binary from the image's userland answers every subcommand, `host-check` reads a simulated
driver root (NVML of the image's architecture), two IMEX stand-ins started through
`nvidia-imex` wrappers form an UP domain, each image's executable is an ELF program of its
manifest's platform, the pause program exits cleanly on SIGTERM, and busybox provides the
workload's shell.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import cdriver
from cdriver.cli import LAZY_COMMANDS, cli
from cdriver.imex import config as imex_config
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY
from cdriver.sim import cli as sim_cli
from cdriver.sim.gpu import nvml_build
from cdriver.sim.gpu.driver_root import create_driver_root
from cdriver.sim.gpu.topology import demo_topology_path
from cdriver_build import emulation, oci, platforms
from cdriver_build.build import (
    BUNDLE_RECORD,
    ImageArchive,
    bundle_key,
    bundle_name,
    cache_root,
    ensure_images,
    image_ref,
    source_root,
)
from cdriver_build.bundle import left_out
from cdriver_build.platforms import ARM64
from tests.support.image_platforms import image_platforms
from tests.support.imex_timing import fast_imex_env

# a cold build packages the arm64 bundle under emulation (see README: tens of minutes on 2 cores)
pytestmark = pytest.mark.timeout(5400)

PEERS = ("127.0.0.1", "127.0.0.2")
FAST_IMEX = fast_imex_env(peer_timeout=2)
#: the driver image's platforms, each checked the same way
PLATFORMS = image_platforms()
TARGETS = [platforms.PLATFORMS[name] for name in PLATFORMS]
#: under emulation a program starts about 40 times slower: more time for the same script
EMULATED_SLOWDOWN = 4
BINFMT = Path("/proc/sys/fs/binfmt_misc")


def machine_binfmt() -> list[str]:
    """The entries of the machine's own binfmt_misc (none when it is not mounted)."""
    return sorted(os.listdir(BINFMT)) if BINFMT.is_dir() else []


def say(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def binfmt_before() -> list[str]:
    return machine_binfmt()


@pytest.fixture(scope="module")
def images(binfmt_before: list[str]) -> dict[str, ImageArchive]:
    return ensure_images(log=say, targets=TARGETS)


@pytest.fixture(scope="module")
def rootfs(images: dict[str, ImageArchive], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """{name: root} for pause and workload, {platform: root} for the driver image of each platform."""
    roots = {}
    for name in ("pause", "workload"):
        roots[name] = tmp_path_factory.mktemp(f"rootfs-{name}")
        oci.extract_rootfs(images[name].archive, roots[name])
    for plat in PLATFORMS:
        roots[plat] = tmp_path_factory.mktemp(f"rootfs-cdriver-{plat.replace('/', '-')}")
        oci.extract_rootfs(images["cdriver"].archive, roots[plat], plat)
    yield roots


def emulated(plat: str) -> bool:
    return plat != platforms.native().name


def in_image(root: Path, script: str, timeout: float = 300,
             plat: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` with the image's /bin/sh, chrooted, in private mount, PID and network namespaces.

    /proc is the new PID namespace's, /dev the host's (as a runtime gives a container a /dev),
    and the network namespace has only loopback, so nothing here reaches or collides with
    anything outside. An image of another architecture (`plat`) runs under emulation: the
    namespaces are made inside the user namespace whose binfmt_misc runs it (cdriver_build.userns).
    """
    r = shlex.quote(str(root))
    setup = (f"ip link set lo up && mkdir -p {r}/proc {r}/dev && mount -t proc proc {r}/proc && "
             f"mount --rbind /dev {r}/dev && exec chroot {r} /bin/sh -c {shlex.quote(script)}")
    argv = ["unshare", "--mount", "--pid", "--net", "--fork", "sh", "-c", setup]
    if plat is not None and emulated(plat):
        argv = emulation.in_namespace(emulation.ensure_qemu(say), argv)
        timeout *= EMULATED_SLOWDOWN
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every subcommand path of the CLI (lazy groups loaded), e.g. ("sim", "imex", "daemon")."""
    ctx = click.Context(group)
    paths = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"{' '.join(prefix + (name,))} is listed but cannot be loaded"
        paths.append(prefix + (name,))
        if isinstance(cmd, click.Group):
            paths += command_paths(cmd, prefix + (name,))
    return paths


def test_archives_are_valid_images_under_local_refs(images: dict[str, ImageArchive]) -> None:
    assert set(images) == {"cdriver", "pause", "workload"}
    for name, image in images.items():
        assert image.ref == image_ref(name)
        found = oci.read_images(image.archive)  # verifies every digest, size, platform and reference
        assert list(found) == (PLATFORMS if name == "cdriver" else ["linux/amd64"])
        for plat, one in found.items():
            assert one.ref == image.ref
            assert f"{one.config['os']}/{one.config['architecture']}" == plat
    drivers = oci.read_images(images["cdriver"].archive)
    for driver in drivers.values():
        assert driver.ref == f"localhost/cdriver:v{cdriver.__version__}"
        assert driver.config["config"]["Entrypoint"] == ["cdriver"]
        assert len(driver.layer_digests) == 2, "a Debian base layer and the application layer"
    assert len({d for driver in drivers.values() for d in driver.layer_digests}) == 2 * len(PLATFORMS), \
        "each platform has its own Debian base and its own bundle"
    assert oci.read_archive(images["pause"].archive).config["config"]["Entrypoint"] == ["/pause"]


@pytest.mark.parametrize("plat", PLATFORMS)
def test_each_images_executable_is_its_platforms_and_the_bundle_of_these_sources(
        rootfs: dict[str, Path], plat: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest's platform is the ELF machine of the executable it carries, built from the checkout's
    sources: the cached bundle of their content for that platform (named here, so a log says which)."""
    root = rootfs[plat]
    exe = root / "opt/cdriver/cdriver"
    assert platforms.of_executable(exe).name == plat
    libs = [p for p in (root / "opt/cdriver").rglob("*.so*") if p.is_file() and not p.is_symlink()]
    assert libs and {platforms.of_executable(p).name for p in libs} == {plat}, "every library of its platform"
    key = bundle_key(source_root(), platforms.PLATFORMS[plat])
    bundle = cache_root() / bundle_name(key, platforms.PLATFORMS[plat])
    record = json.loads((bundle / BUNDLE_RECORD).read_text())
    with capsys.disabled():  # on the terminal whatever the capture: which bundle this run tested
        print(f"\n[images] the {plat} image holds {bundle.name} ({bundle}), packaged at commit "
              f"{record['commit'] or '?'}", file=sys.stderr, flush=True)
    assert record["sources"] == key
    assert (bundle / "dist" / "cdriver-bundle" / "cdriver").read_bytes() == exe.read_bytes()
    assert (bundle / "platform").read_text().strip() == plat


def test_a_second_build_reuses_the_cache(images: dict[str, ImageArchive]) -> None:
    again = ensure_images(log=lambda msg: pytest.fail(f"nothing should be rebuilt, but: {msg}"),
                          targets=TARGETS)
    assert {n: i.archive for n, i in again.items()} == {n: i.archive for n, i in images.items()}
    for image in images.values():
        assert (image.archive.parent / ".complete").is_file()


@pytest.mark.parametrize("plat", PLATFORMS)
def test_driver_image_userland_is_the_containerfiles(rootfs: dict[str, Path], plat: str) -> None:
    root = rootfs[plat]
    assert (root / "usr/bin/cdriver").is_symlink() and (root / "opt/cdriver/cdriver").is_file()
    assert (root / "templates/compute-domain-daemon-config.tmpl.cfg").read_text() == \
        imex_config.load_template()
    status = (root / "var/lib/dpkg/status").read_text()
    for package in ("ca-certificates", "util-linux"):
        assert f"Package: {package}\n" in status
    arch = platforms.PLATFORMS[plat].architecture
    assert {line.split(": ", 1)[1] for line in status.splitlines() if line.startswith("Architecture: ")} \
        <= {arch, "all"}, f"Debian's {arch} packages only"
    assert platforms.of_executable(root / "usr/bin/dash").name == plat, "the /bin/sh of its architecture"
    assert not list((root / "usr/share/man").glob("*/*")), "a -slim image has no manuals"
    assert not list((root / "dev").iterdir()), "device nodes come from the runtime, not the image"


def shipped(path: tuple[str, ...]) -> bool:
    """False for a subcommand whose module the executable leaves out (the simulation harness)."""
    if path[0] == "sim" and len(path) > 1:
        target = sim_cli.LAZY_COMMANDS.get(path[1])
        return target is None or not left_out(target.split(":", 1)[0])
    target = LAZY_COMMANDS.get(path[0])
    return target is None or not left_out(target.split(":", 1)[0])


@pytest.mark.parametrize("plat", PLATFORMS)
def test_packaged_binary_answers_every_subcommand_inside_the_image(rootfs: dict[str, Path], plat: str) -> None:
    version = in_image(rootfs[plat], "cdriver version --json", plat=plat)
    assert version.returncode == 0, version.stderr
    info = json.loads(version.stdout)
    assert (info["cdriver"], info["frozen"]) == (cdriver.__version__, True)
    paths = [p for p in command_paths(cli) if shipped(p)]
    assert ("sim", "imex", "daemon") in paths and ("sim", "imex", "ctl") in paths and ("imex-daemon",) in paths
    # two lanes at once (each start is CPU-bound, most of all under emulation): half the wall time
    lanes = [paths[0::2], paths[1::2]]
    script = "".join(
        "( " + "".join(f"cdriver {shlex.join(p)} --help >/dev/null 2>/tmp/err{n} || {{ echo FAIL {shlex.join(p)}; "
                       f"cat /tmp/err{n}; }}\n" for p in lane) + f") >/tmp/lane{n} 2>&1 &\n"
        for n, lane in enumerate(lanes))
    result = in_image(rootfs[plat], script + "wait\ncat /tmp/lane0 /tmp/lane1\n", plat=plat)
    assert result.returncode == 0 and "FAIL" not in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("plat", PLATFORMS)
def test_the_simulation_harness_is_not_in_the_image(rootfs: dict[str, Path], plat: str) -> None:
    harness = [p for p in command_paths(cli) if len(p) == 2 and not shipped(p)]
    assert {("sim", "cluster"), ("sim", "node"), ("sim", "up"), ("sim", "images")} <= set(harness)
    loop = "".join(f"cdriver {shlex.join(p)} --help >/dev/null 2>&1 && echo SHIPPED {shlex.join(p)}\n"
                   for p in harness)
    result = in_image(rootfs[plat], loop + "true", plat=plat)
    assert "SHIPPED" not in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("plat", PLATFORMS)
def test_imex_standins_form_a_domain_through_driver_root_wrappers(rootfs: dict[str, Path], plat: str) -> None:
    """What a daemon container on a real node does: nvidia-imex is a script that execs the image's cdriver."""
    root = rootfs[plat]
    wrappers = {IMEX_DAEMON_BINARY: "daemon", IMEX_CTL_BINARY: "ctl"}
    work = root / "imex-test"
    (work / "bin").mkdir(parents=True)
    for binary, sub in wrappers.items():
        (work / "bin" / binary).write_text(f'#!/bin/sh\nexec /usr/bin/cdriver sim imex {sub} "$@"\n')
        (work / "bin" / binary).chmod(0o755)
    (work / "nodes.cfg").write_text(imex_config.render_nodes_config(list(PEERS)))
    for i, ip in enumerate(PEERS):
        (work / f"{i}.cfg").write_text(imex_config.render_config(imex_config.load_template(), "/imex-test/nodes.cfg",
                                                                 ip, None, server_port=50000, cmd_port=50005))
    env = " ".join(f"{k}={v}" for k, v in FAST_IMEX.items())
    script = f"""
export {env}
cd /imex-test
bin/{IMEX_DAEMON_BINARY} -c /imex-test/0.cfg >/imex-test/0.log 2>&1 & pid0=$!
bin/{IMEX_DAEMON_BINARY} -c /imex-test/1.cfg >/imex-test/1.log 2>&1 & pid1=$!
for try in $(seq 1 150); do
  out=$(bin/{IMEX_CTL_BINARY} -N -j -c /imex-test/0.cfg 2>/dev/null) && case "$out" in *'"UP"'*) break;; esac
  sleep 0.2
done
echo "ready=$(bin/{IMEX_CTL_BINARY} -q -c /imex-test/1.cfg)"
bin/{IMEX_CTL_BINARY} -N -j -c /imex-test/0.cfg >/imex-test/domain.json
kill -TERM $pid0 $pid1; wait $pid0; echo "exit0=$?"; wait $pid1; echo "exit1=$?"
"""
    result = in_image(root, script, timeout=120, plat=plat)
    logs = "".join((work / f"{i}.log").read_text() for i in (0, 1) if (work / f"{i}.log").exists())
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert lines.get("ready") == "READY", result.stdout + result.stderr + logs
    domain = json.loads((work / "domain.json").read_text())
    assert domain["status"] == "UP", domain
    assert [n["host"] for n in domain["nodes"].values()] == list(PEERS)
    assert (lines["exit0"], lines["exit1"]) == ("0", "0"), logs


#: where an arm64 driver install (Debian's and NVIDIA's packages, the GPU Operator's driver
#: container) puts libnvidia-ml.so.1; the simulated driver root's own layout is usr/lib64
ARM64_LIB_DIR = "usr/lib/aarch64-linux-gnu"


def simulated_driver_root(root: Path, plat: str) -> Path:
    """A simulated driver root below the image root (``/driver-root``), NVML built for `plat`.

    Another architecture's NVML stand-in is built with Debian's cross compiler, and its
    driver root is shaped as that architecture's installs are: the library in its multiarch
    directory rather than usr/lib64.
    """
    driver_root = root / "driver-root"
    # another architecture's NVML stand-in comes from Debian's cross compiler (installed when missing)
    cc = nvml_build.cross_compiler(plat) if emulated(plat) else None
    create_driver_root(driver_root, "worker-1", demo_topology_path(), channel_count=2,
                       wrapper_command=["/usr/bin/cdriver"], cc=cc)
    if plat == ARM64.name:
        (driver_root / ARM64_LIB_DIR).parent.mkdir(parents=True, exist_ok=True)
        (driver_root / "usr/lib64").rename(driver_root / ARM64_LIB_DIR)
    return driver_root


@pytest.mark.parametrize("plat", PLATFORMS)
def test_host_check_reads_a_simulated_driver_root_inside_the_image(rootfs: dict[str, Path], plat: str) -> None:
    """`host-check --json` from the image's binary: the NVML it loads is of its own architecture."""
    driver_root = simulated_driver_root(rootfs[plat], plat)
    library = next(driver_root.rglob("libnvidia-ml.so.1"))
    assert platforms.of_executable(library).name == plat
    result = in_image(rootfs[plat], "cdriver host-check --mode driverManaged --driver-root /driver-root --json",
                      plat=plat)
    try:
        doc = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (exit {result.returncode}):\n{result.stdout}\n{result.stderr}") from None
    checks = {c["name"]: c for c in doc["checks"]}
    assert result.returncode == 0 and doc["passed"] is True, json.dumps(doc, indent=1)
    lib_dir = ARM64_LIB_DIR if plat == ARM64.name else "usr/lib64"
    assert checks["driver-root"]["evidence"] == f"/driver-root (/driver-root/{lib_dir}/libnvidia-ml.so.1)"
    assert checks["nvlink-fabric"]["status"] == "PASS"
    assert "clique 00000000-0000-0000-0000-0000000000ab.0" in checks["nvlink-fabric"]["evidence"]
    assert {c["status"] for c in doc["checks"]} == {"PASS", "SKIP"}


@pytest.mark.multiplatform
@pytest.mark.parametrize("plat", [p for p in PLATFORMS if p != platforms.native().name])
def test_emulation_stays_inside_its_namespace(rootfs: dict[str, Path], binfmt_before: list[str], plat: str) -> None:
    """Building and running the arm64 image registered nothing on the machine: there, its program
    still does not run (unless the machine itself had an emulator registered before)."""
    assert machine_binfmt() == binfmt_before, "the machine's binfmt_misc was changed"
    exe = rootfs[plat] / "opt/cdriver/cdriver"
    if not any(name.startswith("qemu-aarch64") for name in binfmt_before):
        with pytest.raises(OSError) as info:
            subprocess.run([str(exe), "version"], capture_output=True, timeout=60)
        assert info.value.errno == errno.ENOEXEC, info.value
    inside = in_image(rootfs[plat], "uname -m", plat=plat)
    assert inside.stdout.strip() == platforms.PLATFORMS[plat].machine, inside.stderr


def test_pause_image_sleeps_until_sigterm_and_exits_zero(rootfs: dict[str, Path]) -> None:
    root = rootfs["pause"]
    assert [p.name for p in root.iterdir()] == ["pause"], "one static program, nothing else"
    # the image has no shell: the host's starts /pause in the image's root and stops it
    setup = (f"chroot {shlex.quote(str(root))} /pause & pid=$!; sleep 1; "
             "kill -0 $pid && echo running; kill -TERM $pid; wait $pid; echo exit=$?")
    result = subprocess.run(["sh", "-c", setup], capture_output=True, text=True, timeout=60)
    assert "running" in result.stdout and "exit=0" in result.stdout, result.stdout + result.stderr


def test_workload_image_has_a_busybox_shell(rootfs: dict[str, Path]) -> None:
    result = in_image(rootfs["workload"], "ls -l /bin/sh >/dev/null && echo hello | cat && id -u && sleep 0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["hello", "0"]
