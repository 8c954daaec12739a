"""Container environments on simulated nodes: expansion, downward API, refs, service links."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from cdriver.sim.node.simulated.env import (
    EnvContext,
    EnvError,
    command_line,
    container_env,
    expand,
    field_value,
    probe_command,
    resource_value,
)

POD: dict[str, Any] = {
    "metadata": {"name": "web-1", "namespace": "team", "uid": "u-1", "labels": {"app": "web", "tier": "a"},
                 "annotations": {"note": 'say "hi"'}},
    "spec": {"nodeName": "node-3", "serviceAccountName": "runner"},
}


def ctx(**kw: Any) -> EnvContext:
    base: dict[str, Any] = dict(node_name="node-3", host_ip="127.0.1.3", pod_ip="127.0.1.3",
                                api_host="127.0.0.1", api_port=6443, node_allocatable={"cpu": "64", "memory": "1Gi"})
    base.update(kw)
    return EnvContext(**base)


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)-$(B)", "1-2"),
    ("$$(A)", "$(A)"),
    ("$(MISSING)", "$(MISSING)"),
    ("cost $5", "cost $5"),
    ("$(A", "$(A"),
    ("$", "$"),
])
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert expand(text, {"A": "1", "B": "2"}) == expected


def test_downward_api_field_paths() -> None:
    value = lambda path: field_value(POD, path, "127.0.1.3", "127.0.1.3")  # noqa: E731
    assert value("spec.nodeName") == "node-3"
    assert value("status.podIP") == "127.0.1.3"
    assert value("metadata.uid") == "u-1"
    assert value("metadata.labels['app']") == "web"
    assert value("metadata.labels") == 'app="web"\ntier="a"'
    assert value("metadata.annotations") == 'note="say \\"hi\\""'
    with pytest.raises(EnvError, match="not supported"):
        value("spec.bogus")


def test_resource_field_ref_uses_limits_or_node_allocatable_and_rounds_up() -> None:
    container = {"resources": {"limits": {"memory": "1536Mi"}, "requests": {"cpu": "250m"}}}
    assert resource_value(container, "limits.memory", "1Mi", {}) == "1536"
    assert resource_value(container, "limits.memory", "1Gi", {}) == "2"
    assert resource_value(container, "requests.cpu", None, {}) == "1"
    assert resource_value(container, "requests.cpu", "1m", {}) == "250"
    assert resource_value({}, "limits.cpu", None, {"cpu": "64"}) == "64"
    with pytest.raises(EnvError, match="invalid"):
        resource_value({}, "cpu", None, {})


def test_container_env_order_refs_and_defaults() -> None:
    cm = {"data": {"MODE": "fast", "bad=key": "x"}}
    secret = {"data": {"TOKEN": base64.b64encode(b"t0k").decode()}}
    c = ctx(get_configmap=lambda ns, name: cm if (ns, name) == ("team", "cfg") else None,
            get_secret=lambda ns, name: secret if name == "sec" else None, path_prefix=["/opt/cdriver/bin"])
    container = {
        "name": "main",
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
            {"name": "URL", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)/$(NODE)"},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": True}}},
        ],
    }
    env = container_env(POD, container, c)
    assert env["CFG_MODE"] == "fast" and "CFG_bad=key" not in env
    assert env["TOKEN"] == "t0k"
    assert env["URL"] == "https://127.0.0.1:6443/node-3"
    assert "OPT" not in env
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["HOSTNAME"] == "web-1" and env["HOME"] == "/root"
    assert env["PATH"].startswith("/opt/cdriver/bin:") and env["PATH"].endswith("/bin")


def test_missing_required_refs_name_the_object_and_key() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}
    with pytest.raises(EnvError, match='configmap "cfg" not found in namespace team'):
        container_env(POD, container, ctx())
    c = ctx(get_configmap=lambda ns, name: {"data": {}})
    with pytest.raises(EnvError, match="couldn't find key k in ConfigMap team/cfg"):
        container_env(POD, container, c)


def test_service_links_for_namespace_services_unless_disabled() -> None:
    svc = {"metadata": {"name": "my-db"}, "spec": {"clusterIP": "10.0.0.9", "ports": [
        {"name": "sql", "port": 5432, "protocol": "TCP"}]}}
    headless = {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}}
    env = container_env(POD, {"name": "m"}, ctx(services=[svc, headless]))
    assert env["MY_DB_SERVICE_HOST"] == "10.0.0.9"
    assert env["MY_DB_SERVICE_PORT_SQL"] == "5432"
    assert env["MY_DB_PORT_5432_TCP"] == "tcp://10.0.0.9:5432"
    assert not any(k.startswith("PEERS_") for k in env)
    no_links = {**POD, "spec": {**POD["spec"], "enableServiceLinks": False}}
    env = container_env(no_links, {"name": "m"}, ctx(services=[svc]))
    assert "MY_DB_SERVICE_HOST" not in env and env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"


def test_host_network_pods_see_the_node_name_as_hostname() -> None:
    pod = {**POD, "spec": {**POD["spec"], "hostNetwork": True}}
    assert container_env(pod, {"name": "m"}, ctx())["HOSTNAME"] == "node-3"


def test_command_line_expands_and_requires_a_command() -> None:
    assert command_line({"command": ["echo"], "args": ["$(A)", "$$(A)"]}, {"A": "x"}) == ["echo", "x", "$(A)"]
    with pytest.raises(EnvError, match="set `command`"):
        command_line({"name": "main", "args": ["x"]}, {})


def test_exec_probe_commands_expand_static_env_only() -> None:
    """kubelet expands `$(VAR)` in exec probes from the container's literal env values."""
    container = {"env": [{"name": "LOG_VERBOSITY", "value": "4"},
                         {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}
    command = ["daemon", "-v", "$(LOG_VERBOSITY)", "--node", "$(NODE)", "$$(LOG_VERBOSITY)"]
    assert probe_command(container, command) == ["daemon", "-v", "4", "--node", "$(NODE)", "$(LOG_VERBOSITY)"]
