"""The roles' shared HTTP endpoint: metrics at the configured path, health only when asked."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from cdriver.httpserve import HttpServer, normalise_path


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("demo_requests", "Demo.", registry=registry).inc(3)
    return registry


def test_metrics_path_is_served_and_other_paths_are_404(registry: CollectorRegistry) -> None:
    server = HttpServer("127.0.0.1:0", registry, "custom/")
    server.start()
    try:
        for path in ("/custom", "/custom/", "/custom?x=1"):
            code, body = fetch(server.port, path)
            assert code == 200 and "demo_requests_total 3.0" in body
        assert fetch(server.port, "/metrics")[0] == 404
        assert fetch(server.port, "/healthz")[0] == 404  # no health source given
    finally:
        server.stop()


def test_health_paths_report_the_health_source(registry: CollectorRegistry) -> None:
    state = {"ok": False}
    server = HttpServer("127.0.0.1:0", registry, "/metrics", lambda: (state["ok"], "starting"))
    server.start()
    try:
        assert fetch(server.port, "/healthz") == (503, "starting\n")
        state["ok"] = True
        for path in ("/healthz", "/readyz", "/livez"):
            assert fetch(server.port, path)[0] == 200
    finally:
        server.stop()


def test_each_checked_path_answers_from_its_own_source(registry: CollectorRegistry) -> None:
    checks = {"/readyz": lambda: (False, "not READY"), "/startupz": lambda: (True, "READY")}
    server = HttpServer("127.0.0.1:0", registry, "", lambda: (True, "alive"), checks=checks)
    server.start()
    try:
        assert fetch(server.port, "/readyz") == (503, "not READY\n")
        assert fetch(server.port, "/startupz") == (200, "READY\n")
        assert fetch(server.port, "/livez") == (200, "alive\n")
        assert fetch(server.port, "/metrics")[0] == 404  # no metrics path: probes only
    finally:
        server.stop()


def test_bad_endpoint_and_busy_port_raise(registry: CollectorRegistry) -> None:
    with pytest.raises(ValueError, match="--http-endpoint"):
        HttpServer("8080", registry)
    first = HttpServer("127.0.0.1:0", registry)
    try:
        with pytest.raises(OSError):
            HttpServer(f"127.0.0.1:{first.port}", registry)
    finally:
        first.stop()  # never started: must not hang


def test_normalise_path() -> None:
    assert normalise_path("metrics/") == "/metrics"
    assert normalise_path("/a/b") == "/a/b"
    assert normalise_path("") == ""
