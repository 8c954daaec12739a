"""A real Prometheus beside the local cluster, configured as a user would configure theirs.

`prometheus_config` (pure) turns the chart's shipped scrape configuration into a whole
Prometheus configuration: the same jobs, each `kubernetes_sd_configs` entry pointed at the local
API server through a kubeconfig file (what a Prometheus outside the cluster needs; inside, it
uses its service account instead), plus rule files and intervals. `LocalPrometheus` runs the
`prometheus` binary on a free loopback port with that configuration and reads its HTTP API:
instant queries, range queries, targets and alerts.
"""

from __future__ import annotations

import copy
import json
import logging
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cdriver.atomic import atomic_write
from cdriver.errors import CdriverError
from cdriver.sim.controlplane.cluster import free_port, parent_death_signal, tail_lines

log = logging.getLogger(__name__)

#: how long Prometheus may take to open its TSDB and answer /-/ready
READY_TIMEOUT = 60.0
STOP_GRACE = 10.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PrometheusError(CdriverError):
    """Prometheus could not start, or its API answered with an error."""


@dataclass(frozen=True)
class Intervals:
    """How often Prometheus scrapes and evaluates rules (Prometheus duration strings)."""

    scrape: str = "15s"
    evaluation: str = "15s"


def prometheus_config(scrape_configs: list[dict[str, Any]], kubeconfig: Path, rule_files: list[Path],
                      intervals: Intervals = Intervals()) -> dict[str, Any]:
    """The whole configuration: `scrape_configs` as shipped, service discovery through `kubeconfig`.

    Raises PrometheusError for a scrape configuration that is not a list of jobs.
    """
    if not isinstance(scrape_configs, list) or not all(isinstance(j, dict) and j.get("job_name")
                                                       for j in scrape_configs):
        raise PrometheusError("the scrape configuration must be a list of jobs, each with a job_name "
                              "(the chart's monitoring/scrape-config.yaml)")
    jobs = copy.deepcopy(scrape_configs)
    for job in jobs:
        for sd in job.get("kubernetes_sd_configs") or []:
            sd["kubeconfig_file"] = str(kubeconfig)
    return {
        "global": {"scrape_interval": intervals.scrape, "evaluation_interval": intervals.evaluation,
                   "scrape_timeout": intervals.scrape},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": jobs,
    }


def load_scrape_configs(path: Path) -> list[dict[str, Any]]:
    """The jobs of a scrape configuration file: a list of jobs, or a mapping with `scrape_configs`."""
    data = yaml.safe_load(path.read_text())
    if isinstance(data, dict):
        data = data.get("scrape_configs")
    if not isinstance(data, list):
        raise PrometheusError(f"{path}: expected a list of scrape jobs or a scrape_configs mapping")
    return data


class LocalPrometheus:
    """One `prometheus` process with its configuration, data and log under `run_dir`."""

    def __init__(self, binary: Path, run_dir: Path, config: dict[str, Any]) -> None:
        self.binary = binary
        self.run_dir = run_dir
        self.config = config
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "prometheus.log"

    def start(self) -> LocalPrometheus:
        """Write the configuration, start Prometheus and wait until it is ready."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.run_dir / "prometheus.yml"
        atomic_write(config_path, yaml.safe_dump(self.config, sort_keys=False))
        self.port = free_port()
        argv = [str(self.binary), f"--config.file={config_path}",
                f"--storage.tsdb.path={self.run_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"]
        with open(self.log_path, "ab") as logf:
            try:
                self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                              stderr=subprocess.STDOUT, start_new_session=True,
                                              preexec_fn=parent_death_signal)
            except OSError as exc:
                raise PrometheusError(f"cannot run {self.binary}: {exc.strerror or exc}; build it with "
                                      "hack/prometheus/build.sh") from None
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self._proc.returncode}:\n"
                                      f"{tail_lines(self.log_path)}")
            try:
                with _NO_PROXY.open(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready after {READY_TIMEOUT:.0f} s:\n{tail_lines(self.log_path)}")

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api(self, path: str, **params: str) -> Any:
        """GET `/api/v1/<path>` and return its `data`; PrometheusError with the API's error otherwise."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with _NO_PROXY.open(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(f"GET {url}: {exc}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (each item: `metric` labels and `value` [time, text])."""
        data = self.api("query", query=expr)
        return list(data["result"]) if data.get("resultType") == "vector" else [data]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query's matrix (each item: `metric` labels and `values` [[time, text], ...])."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
        return list(data["result"])

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets with their labels, health and last error."""
        return list(self.api("targets", state="active")["activeTargets"])

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts pending or firing now (each: `labels`, `annotations`, `state`, `activeAt`)."""
        return list(self.api("alerts")["alerts"])

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        """The firing alerts named `alertname`."""
        return [a for a in self.alerts() if a["labels"].get("alertname") == alertname and a["state"] == "firing"]
