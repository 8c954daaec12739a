"""Draw the shipped Grafana dashboard's panels from a real run (the README's monitoring picture).

A simulated cluster (kubelet's timings) with the chart's defaults, a real Prometheus beside it
loading the chart's plain scrape configuration and alert rules, and a short story: a
ComputeDomain bootstraps on two nodes; a second one is created on a node where another process
holds the IMEX port, so its nvidia-imex fails to start until the port is freed; both are
deleted. Each panel's queries are then read back from Prometheus over the run and drawn with
matplotlib (Grafana itself does not run here). Run: ``make monitoring-picture``.
Development only: not part of the installed package.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from cdriver.checkout import CHART_DIR
from cdriver.sim.controlplane.binaries import prometheus_binaries
from cdriver.sim.monitoring.prometheus import Intervals, LocalPrometheus, load_scrape_configs, prometheus_config
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld, WorldSettings

MONITORING = CHART_DIR / "monitoring"
IMEX_PORT = 50000
NAMESPACE = "picture"
#: Grafana's variables, as Grafana would fill them for this run
VARIABLES = {"$__rate_interval": "1m", "$namespace": ".+"}
STEP_S = 5.0


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def story(world: SimWorld, marks: list[tuple[float, str]]) -> None:
    """The run the picture shows; `marks` gets (time, what happened)."""
    raw = world.raw
    cliques = sorted({n.clique for n in world.nodes if n.clique})
    first = sorted(n.name for n in world.nodes if n.clique == cliques[0])
    blocked_node = world.node(sorted(n.name for n in world.nodes if n.clique == cliques[-1])[0])
    time.sleep(30)
    scenario.ensure_namespace(raw, NAMESPACE)
    raw.create(scenario.CDS, scenario.compute_domain("train", NAMESPACE, "train-channel"), NAMESPACE)
    scenario.wait_for("template", lambda: raw.get_or_none(scenario.RCTS, "train-channel", NAMESPACE), 60)
    for i, node in enumerate(first):
        raw.create(scenario.PODS, scenario.workload_pod(f"w{i}", NAMESPACE, "train-channel", node=node), NAMESPACE)
    marks.append((time.time(), "domain 'train': 2 pods"))
    scenario.wait_pods_running(raw, NAMESPACE, [f"w{i}" for i in range(len(first))], 300)
    say("train: pods running")
    time.sleep(60)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((blocked_node.ip, IMEX_PORT))
    holder.listen()
    raw.create(scenario.CDS, scenario.compute_domain("blocked", NAMESPACE, "blocked-channel"), NAMESPACE)
    scenario.wait_for("template", lambda: raw.get_or_none(scenario.RCTS, "blocked-channel", NAMESPACE), 60)
    raw.create(scenario.PODS, scenario.workload_pod("b", NAMESPACE, "blocked-channel", node=blocked_node.name),
               NAMESPACE)
    marks.append((time.time(), f"'blocked': IMEX port held on {blocked_node.name}"))
    say("blocked: port held")
    time.sleep(120)
    holder.close()
    marks.append((time.time(), "port freed"))
    scenario.wait_pods_running(raw, NAMESPACE, ["b"], 300)
    say("blocked: pod running")
    time.sleep(60)
    for pod in [*(f"w{i}" for i in range(len(first))), "b"]:
        raw.delete(scenario.PODS, pod, NAMESPACE)
    for cd in ("train", "blocked"):
        raw.delete(scenario.CDS, cd, NAMESPACE)
    marks.append((time.time(), "both deleted"))
    scenario.wait_for("domains deleted", lambda: not raw.list(scenario.CDS, NAMESPACE)["items"], 300)
    time.sleep(60)


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's `{{label}}` legend format filled from a series' labels."""
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def panels() -> list[dict[str, Any]]:
    """The dashboard's graph panels (rows left out)."""
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    return [p for p in dashboard["panels"] if p.get("targets")]


def draw(prom: LocalPrometheus, start: float, end: float, marks: list[tuple[float, str]], out: Path,
         commit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = panels()
    cols = 4
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.2, rows * 3.0), squeeze=False)
    for ax, panel in zip(axes.flat, shown, strict=False):
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            for series in prom.query_range(expr, start, end, STEP_S):
                xs = [(float(t) - start) / 60 for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=legend(target.get("legendFormat", ""), series["metric"])[:40], lw=1.2)
        for t, _ in marks:
            ax.axvline((t - start) / 60, color="grey", lw=0.6, ls=":")
        ax.set_title(panel["title"], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlim(0, (end - start) / 60)
        if ax.get_lines():
            handles, labels = ax.get_legend_handles_labels()
            if len(handles) <= 6:
                ax.legend(fontsize=6, loc="upper left")
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    story_text = "; ".join(f"{(t - start) / 60:.1f} min: {what}" for t, what in marks)
    fig.suptitle(f"cdriver dashboard panels from Prometheus's data of one run (4 simulated GB200 nodes, kubelet "
                 f"timings; minutes on the x axis) at {commit}\n{story_text}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    say(f"wrote {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/monitoring-dashboard.png"))
    parser.add_argument("--base-dir", type=Path, default=Path("/tmp/cdriver-dashboard-picture"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    shutil.rmtree(args.base_dir, ignore_errors=True)
    args.base_dir.mkdir(parents=True)
    binary = prometheus_binaries().prometheus
    marks: list[tuple[float, str]] = []
    with SimWorld(WorldSettings(base_dir=args.base_dir / "world", nodes=4), progress=say) as world:
        config = prometheus_config(load_scrape_configs(MONITORING / "scrape-config.yaml"), world.kubeconfig,
                                   [MONITORING / "cdriver-alerts.yaml"], Intervals("5s", "5s"))
        with LocalPrometheus(binary, args.base_dir / "prometheus", config) as prom:
            start = time.time()
            story(world, marks)
            end = time.time()
            fired = sorted({a["labels"]["alertname"] for a in prom.alerts()})
            say(f"alerts pending or firing at the end: {fired or 'none'}")
            draw(prom, start, end, marks, args.out, commit)
    say(f"driver namespace was {DRIVER_NAMESPACE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
