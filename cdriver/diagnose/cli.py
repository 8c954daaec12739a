"""`cdriver diagnose` and the kubectl plugin `kubectl cdriver diagnose`."""

from __future__ import annotations

import sys

import click

from cdriver.diagnose.model import EXIT_COULD_NOT_RUN, Diagnosis

KINDS = {"computedomain": "computedomain", "computedomains": "computedomain", "cd": "computedomain",
         "pod": "pod", "pods": "pod", "po": "pod"}


def _kube_args(kubeconfig: str | None, context: str | None) -> list[str]:
    args = []
    if kubeconfig:
        args += ["--kubeconfig", kubeconfig]
    if context:
        args += ["--context", context]
    return args


def run(kind: str | None, name: str | None, namespace: str, all_: bool, do_exec: bool, kubeconfig: str | None,
        context: str | None, driver_namespace: str | None, kubectl: str) -> Diagnosis:
    """Collect, check and return the diagnosis (never raises for cluster or config problems)."""
    from cdriver.diagnose import chain, pod_links
    from cdriver.diagnose.collect import CollectError, Collector, kubectl_exec
    from cdriver.diagnose.snapshot import Snapshot
    from cdriver.errors import CdriverError
    from cdriver.kube.client import new_raw_client

    try:
        raw = new_raw_client(kubeconfig, context)
        data = Collector(raw).collect(None if all_ else namespace, driver_namespace)
    except (CollectError, CdriverError) as exc:
        return Diagnosis(error=str(exc))
    snap = Snapshot(data)
    try:
        if do_exec:
            data["execEnabled"] = True
            for cd in snap.items("computedomains"):
                only = snap.find("pods", name or "", namespace) if kind == "pod" else None
                for w in chain.workloads_of(snap, cd, only):
                    containers = pod_links.claim_users(w.pod, w.claim_ref)
                    meta = w.pod["metadata"]
                    if w.started and containers:
                        data["exec"][f"{meta['namespace']}/{meta['name']}"] = kubectl_exec(
                            kubectl, _kube_args(kubeconfig, context), meta["namespace"], meta["name"], containers[0],
                            ["ls", "-l", "/dev/nvidia-caps-imex-channels"])
            snap = Snapshot(data)
        if all_:
            return Diagnosis(chain.diagnose_all(snap))
        if kind == "pod":
            return Diagnosis([chain.diagnose_pod(snap, namespace, name or "")])
        return Diagnosis([chain.diagnose_computedomain(snap, namespace, name or "")])
    except chain.TargetNotFound as exc:
        hidden = snap.refused("pods" if kind == "pod" else "computedomains", "" if all_ else namespace)
        why = f" (listing was forbidden: {hidden})" if hidden else ""
        return Diagnosis(error=f"{exc}{why}; check the name and namespace (-n)")


@click.command("diagnose", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("kind", required=False, metavar="[computedomain|pod]")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace of the target.")
@click.option("-A", "--all", "all_", is_flag=True, help="Diagnose every ComputeDomain in the cluster.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--exec", "do_exec", is_flag=True,
              help="Also look inside each workload container (kubectl exec ... ls -l /dev/nvidia-caps-imex-channels).")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None,
              help="Kubeconfig (default: $KUBECONFIG, ~/.kube/config).")
@click.option("--context", default=None, help="Kubeconfig context.")
@click.option("--driver-namespace", default=None, help="Namespace of the driver (default: found from its controller).")
@click.option("--kubectl", default="kubectl", show_default=True, help="kubectl binary used by --exec.")
@click.option("-q", "--quiet", is_flag=True, help="Text output without the evidence lines.")
def command(kind: str | None, name: str | None, namespace: str, all_: bool, output: str, do_exec: bool,
            kubeconfig: str | None, context: str | None, driver_namespace: str | None, kubectl: str,
            quiet: bool) -> None:
    """Name the first broken link of a ComputeDomain, with the evidence chain.

    \b
      cdriver diagnose computedomain NAME -n NS
      cdriver diagnose pod NAME -n NS
      cdriver diagnose --all [-o json]

    Walks installation -> ResourceSlices -> ComputeDomain and mode -> workload template ->
    claim allocation -> node label -> daemon DaemonSet/pod/claim -> clique entry (or host
    socket) -> CDI device ID -> device in the container, and prints PASS / FAIL / WAIT / SKIP
    per link with the identifiers that tie the layers together.

    Strictly read-only: it never labels, deletes, restarts or patches anything. It runs with
    your kubeconfig; with --exec it runs `ls` in workload containers via kubectl exec.

    \b
    Exit codes: 0 every link passes, 1 a link failed, 2 could not run (or RBAC hid a link),
    3 only waits (the domain is bootstrapping).
    """
    from cdriver.diagnose.render import render_json, render_text

    if not all_:
        norm = KINDS.get((kind or "").lower())
        if norm is None or not name:
            raise click.UsageError("name a target: `computedomain NAME -n NS`, `pod NAME -n NS`, or use --all"
                                   + (f" (unknown kind {kind!r})" if kind and norm is None else ""))
        kind = norm
    elif kind or name:
        raise click.UsageError("--all diagnoses every ComputeDomain; leave out KIND and NAME")
    diagnosis = run(kind, name, namespace, all_, do_exec, kubeconfig, context, driver_namespace, kubectl)
    click.echo(render_json(diagnosis) if output == "json" else render_text(diagnosis, verbose=not quiet))
    sys.exit(diagnosis.exit_code if diagnosis.chains or diagnosis.error else EXIT_COULD_NOT_RUN)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def plugin() -> None:
    """kubectl cdriver: the cdriver ComputeDomain driver's kubectl plugin."""


plugin.add_command(command)


def kubectl_main() -> None:
    """Entry point of the `kubectl-cdriver` executable (`kubectl cdriver diagnose ...`)."""
    plugin(prog_name="kubectl cdriver")
