"""The images real nodes run: built without a container engine, valid OCI archives, and working.

Builds (or finds cached) the driver, pause and workload images, reads each archive back with
the validating reader (every blob against its digest, index -> manifest -> config -> layers),
then unpacks each image and runs it in its own root file system (chroot, private mount, PID
and network namespaces): the packaged binary from the image's userland answers every
subcommand, two IMEX stand-ins started through `nvidia-imex` wrappers form an UP domain, the
pause program exits cleanly on SIGTERM, and busybox provides the workload's shell.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import cdriver
from cdriver.cli import LAZY_COMMANDS, cli
from cdriver.imex import config as imex_config
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY
from cdriver.sim import cli as sim_cli
from cdriver_build import oci
from cdriver_build.build import ImageArchive, ensure_images, image_ref
from cdriver_build.bundle import left_out
from tests.support.imex_timing import fast_imex_env

pytestmark = pytest.mark.timeout(1800)

PEERS = ("127.0.0.1", "127.0.0.2")
FAST_IMEX = fast_imex_env(peer_timeout=2)


@pytest.fixture(scope="module")
def images() -> dict[str, ImageArchive]:
    return ensure_images()


@pytest.fixture(scope="module")
def rootfs(images: dict[str, ImageArchive], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    roots = {}
    for name, image in images.items():
        roots[name] = tmp_path_factory.mktemp(f"rootfs-{name}")
        oci.extract_rootfs(image.archive, roots[name])
    yield roots


def in_image(root: Path, script: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `script` with the image's /bin/sh, chrooted, in private mount, PID and network namespaces.

    /proc is the new PID namespace's, /dev the host's (as a runtime gives a container a /dev),
    and the network namespace has only loopback, so nothing here reaches or collides with
    anything outside.
    """
    r = shlex.quote(str(root))
    setup = (f"ip link set lo up && mkdir -p {r}/proc {r}/dev && mount -t proc proc {r}/proc && "
             f"mount --rbind /dev {r}/dev && exec chroot {r} /bin/sh -c {shlex.quote(script)}")
    return subprocess.run(["unshare", "--mount", "--pid", "--net", "--fork", "sh", "-c", setup],
                          capture_output=True, text=True, timeout=timeout)


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
        found = oci.read_archive(image.archive)  # verifies every digest, size and reference
        assert found.ref == image.ref
        assert found.config["os"] == "linux" and found.config["architecture"] == "amd64"
    driver = oci.read_archive(images["cdriver"].archive)
    assert driver.ref == f"localhost/cdriver:v{cdriver.__version__}"
    assert driver.config["config"]["Entrypoint"] == ["cdriver"]
    assert len(driver.layer_digests) == 2, "a Debian base layer and the application layer"
    assert oci.read_archive(images["pause"].archive).config["config"]["Entrypoint"] == ["/pause"]


def test_a_second_build_reuses_the_cache(images: dict[str, ImageArchive]) -> None:
    again = ensure_images(log=lambda msg: pytest.fail(f"nothing should be rebuilt, but: {msg}"))
    assert {n: i.archive for n, i in again.items()} == {n: i.archive for n, i in images.items()}
    for image in images.values():
        assert (image.archive.parent / ".complete").is_file()


def test_driver_image_userland_is_the_containerfiles(rootfs: dict[str, Path]) -> None:
    root = rootfs["cdriver"]
    assert (root / "usr/bin/cdriver").is_symlink() and (root / "opt/cdriver/cdriver").is_file()
    assert (root / "templates/compute-domain-daemon-config.tmpl.cfg").read_text() == \
        imex_config.load_template()
    status = (root / "var/lib/dpkg/status").read_text()
    for package in ("ca-certificates", "util-linux"):
        assert f"Package: {package}\n" in status
    assert not list((root / "usr/share/man").glob("*/*")), "a -slim image has no manuals"
    assert not list((root / "dev").iterdir()), "device nodes come from the runtime, not the image"


def shipped(path: tuple[str, ...]) -> bool:
    """False for a subcommand whose module the executable leaves out (the simulation harness)."""
    if path[0] == "sim" and len(path) > 1:
        target = sim_cli.LAZY_COMMANDS.get(path[1])
        return target is None or not left_out(target.split(":", 1)[0])
    target = LAZY_COMMANDS.get(path[0])
    return target is None or not left_out(target.split(":", 1)[0])


def test_packaged_binary_answers_every_subcommand_inside_the_image(rootfs: dict[str, Path]) -> None:
    version = in_image(rootfs["cdriver"], "cdriver version --json")
    assert version.returncode == 0, version.stderr
    info = json.loads(version.stdout)
    assert (info["cdriver"], info["frozen"]) == (cdriver.__version__, True)
    paths = [p for p in command_paths(cli) if shipped(p)]
    assert ("sim", "imex", "daemon") in paths and ("sim", "imex", "ctl") in paths and ("imex-daemon",) in paths
    loop = "".join(f"cdriver {shlex.join(p)} --help >/dev/null 2>/tmp/err || {{ echo FAIL {shlex.join(p)}; "
                   "cat /tmp/err; }\n" for p in paths)
    result = in_image(rootfs["cdriver"], loop)
    assert result.returncode == 0 and "FAIL" not in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_simulation_harness_is_not_in_the_image(rootfs: dict[str, Path]) -> None:
    harness = [p for p in command_paths(cli) if len(p) == 2 and not shipped(p)]
    assert {("sim", "cluster"), ("sim", "node"), ("sim", "up"), ("sim", "images")} <= set(harness)
    loop = "".join(f"cdriver {shlex.join(p)} --help >/dev/null 2>&1 && echo SHIPPED {shlex.join(p)}\n"
                   for p in harness)
    result = in_image(rootfs["cdriver"], loop + "true")
    assert "SHIPPED" not in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


def test_imex_standins_form_a_domain_through_driver_root_wrappers(rootfs: dict[str, Path]) -> None:
    """What a daemon container on a real node does: nvidia-imex is a script that execs the image's cdriver."""
    root = rootfs["cdriver"]
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
    result = in_image(root, script, timeout=120)
    logs = "".join((work / f"{i}.log").read_text() for i in (0, 1) if (work / f"{i}.log").exists())
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert lines.get("ready") == "READY", result.stdout + result.stderr + logs
    domain = json.loads((work / "domain.json").read_text())
    assert domain["status"] == "UP", domain
    assert [n["host"] for n in domain["nodes"].values()] == list(PEERS)
    assert (lines["exit0"], lines["exit1"]) == ("0", "0"), logs


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
