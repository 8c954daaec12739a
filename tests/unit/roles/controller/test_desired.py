"""Objects the controller generates for a ComputeDomain (rendered from the templates)."""

from __future__ import annotations

import pytest

from cdriver import featuregates
from cdriver.api import constants
from cdriver.api.types import decode_opaque_config
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.roles.controller import daemon_gates, desired
from cdriver.roles.controller.desired import DAEMON_POD_CLAIM_NAME
from cdriver.roles.controller.reconciler import parse_domain
from cdriver.roles.controller.settings import ControllerSettings
from cdriver.roles.imex_daemon.cli import CHECK_TIMEOUT
from cdriver.roles.imex_daemon.health import STARTUP_WAIT_SECONDS

UID = "6a1b2c3d-0000-4000-8000-00000000abcd"


def domain(mode: str | None = None, template: str = "imex-channel-0", ns: str = "team-a"):
    channel: dict = {"resourceClaimTemplate": {"name": template}}
    if mode is not None:
        channel["allocationMode"] = mode
    return parse_domain({
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd1", "namespace": ns, "uid": UID},
        "spec": {"numNodes": 0, "channel": channel},
    })


def settings(**kw) -> ControllerSettings:
    base = dict(namespace="driver-ns", daemon_image="registry.local/cdriver:1.2",
                feature_gates_env=featuregates.FeatureGates().to_env())
    base.update(kw)
    return ControllerSettings(**base)


def opaque(template: dict) -> dict:
    config = template["spec"]["spec"]["devices"]["config"]
    assert len(config) == 1
    return config[0]


def test_workload_template_names_labels_and_channel_config():
    obj = desired.workload_claim_template(domain(), settings())
    meta = obj["metadata"]
    assert (obj["apiVersion"], obj["kind"]) == ("resource.k8s.io/v1", "ResourceClaimTemplate")
    assert (meta["namespace"], meta["name"]) == ("team-a", "imex-channel-0")
    assert meta["finalizers"] == [constants.FINALIZER]
    assert meta["labels"] == {constants.LABEL_COMPUTE_DOMAIN: UID, constants.LABEL_TARGET: constants.TARGET_WORKLOAD}
    requests = obj["spec"]["spec"]["devices"]["requests"]
    assert requests == [{"name": "channel", "exactly": {
        "deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL,
        # a node's shared channel goes to no other domain than the one holding the node
        "selectors": [{"cel": {"expression": (
            '!("computeDomain" in device.attributes["compute-domain.nvidia.com"]) '
            f'|| device.attributes["compute-domain.nvidia.com"].computeDomain == "{UID}"')}}]}}]
    config = opaque(obj)
    assert config["requests"] == ["channel"]
    assert config["opaque"]["driver"] == constants.DRIVER_NAME
    # The node plugin decodes exactly this, strictly.
    decoded = decode_opaque_config(config["opaque"]["parameters"])
    assert decoded.domain_id == UID and decoded.allocation_mode == constants.ALLOCATION_MODE_SINGLE


@pytest.mark.parametrize("asked,host,expected", [
    ("All", False, "All"), ("Single", False, "Single"), (None, False, "Single"),
    ("All", True, "Single"), ("Single", True, "Single"), (None, True, "Single"),
])
def test_allocation_mode_passes_through_or_is_forced_to_single_in_host_mode(asked, host, expected):
    obj = desired.workload_claim_template(domain(asked), settings(host_managed=host))
    assert opaque(obj)["opaque"]["parameters"]["allocationMode"] == expected
    assert desired.allocation_mode_forced(asked or "", host) is (host and asked == "All")


def test_daemon_template_lives_in_driver_namespace_with_daemon_config():
    obj = desired.daemon_claim_template(domain(), settings())
    meta = obj["metadata"]
    assert (meta["namespace"], meta["name"]) == ("driver-ns", f"computedomain-daemon-{UID}")
    assert meta["labels"] == {constants.LABEL_COMPUTE_DOMAIN: UID, constants.LABEL_TARGET: constants.TARGET_DAEMON}
    assert obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] \
        == constants.DEVICE_CLASS_DAEMON
    params = opaque(obj)["opaque"]["parameters"]
    assert params == {"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": UID}
    assert decode_opaque_config(params).domain_id == UID


def _env(container: dict) -> dict:
    out = {}
    for item in container["env"]:
        out[item["name"]] = item.get("value", item.get("valueFrom"))
    return out


def test_daemon_set_targets_labelled_nodes_and_runs_the_daemon():
    gates = featuregates.FeatureGates.parse("ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false")
    s = settings(feature_gates_env=gates.to_env(), max_nodes_per_imex_domain=9,
                 daemon_log_verbosity=5, image_pull_secrets=("pull-a", "pull-b"))
    ds = desired.daemon_set(domain(), s, "legacy-template-name")
    meta, spec = ds["metadata"], ds["spec"]
    pod = spec["template"]["spec"]
    assert (meta["namespace"], meta["name"]) == ("driver-ns", f"computedomain-daemon-{UID}")
    assert meta["finalizers"] == [constants.FINALIZER]
    assert spec["selector"] == {"matchLabels": {constants.LABEL_COMPUTE_DOMAIN: UID}}
    assert spec["template"]["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] == UID
    assert pod["nodeSelector"] == {constants.LABEL_COMPUTE_DOMAIN: UID}
    assert pod["serviceAccountName"] == constants.DAEMON_SERVICE_ACCOUNT
    assert pod["imagePullSecrets"] == [{"name": "pull-a"}, {"name": "pull-b"}]
    assert {t["effect"] for t in pod["tolerations"]} == {"NoSchedule", "NoExecute",
                                                         "PreferNoSchedule"}
    assert all(t["operator"] == "Exists" for t in pod["tolerations"])
    assert pod["resourceClaims"] == [{"name": DAEMON_POD_CLAIM_NAME,
                                      "resourceClaimTemplateName": "legacy-template-name"}]
    (container,) = pod["containers"]
    assert container["image"] == "registry.local/cdriver:1.2"
    assert container["command"] == ["cdriver", "imex-daemon", "run"]
    assert container["resources"]["claims"] == [{"name": DAEMON_POD_CLAIM_NAME}]
    # With an HTTP endpoint the running daemon answers its probes: no process per probe.
    probes = {probe: container[probe] for probe in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {probe: (spec["httpGet"], "exec" in spec) for probe, spec in probes.items()} == {
        "startupProbe": ({"path": "/startupz", "port": "metrics"}, False),
        "livenessProbe": ({"path": "/livez", "port": "metrics"}, False),
        "readinessProbe": ({"path": "/readyz", "port": "metrics"}, False)}
    _assert_probe_timings(container, initial_delay=desired.DAEMON_HTTP_STARTUP_DELAY_SECONDS)
    # /startupz holds a request until READY within the probe's timeout: no failure while starting.
    assert STARTUP_WAIT_SECONDS < probes["startupProbe"]["timeoutSeconds"]
    env = _env(container)
    assert env[ENV_FEATURE_GATES] == gates.to_env()
    assert "ComputeDomainCliques=false," in env[ENV_FEATURE_GATES]
    assert env[constants.ENV_MAX_NODES] == "9" and env["LOG_VERBOSITY"] == "5"
    for name, path in desired.DOWNWARD_ENV:
        assert env[name] == {"fieldRef": {"fieldPath": path}}
    assert set(env) >= {"NODE_NAME", "POD_IP", "POD_NAME", "POD_NAMESPACE", "POD_UID"}


def test_daemon_set_replaces_every_pod_at_once_and_carries_the_controllers_stamp():
    """A change of the controller's gates restarts the whole domain at once, and an older
    controller can tell that a newer one created it (`daemon_gates`)."""
    ds = desired.daemon_set(domain(), settings(started_at="2026-01-01T10:00:00.000000Z"), "t")
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    assert ds["metadata"]["annotations"] == {daemon_gates.ANNOTATION_GATES_SET_AT: "2026-01-01T10:00:00.000000Z"}
    assert "annotations" not in desired.daemon_set(domain(), settings(started_at=""), "t")["metadata"]


def test_daemon_pods_resolve_dotless_names_without_the_dns_search_list():
    """ndots:1 (upstream #1465): a peer name missing from /etc/hosts is one DNS query, not one
    per search domain of the cluster; the pod keeps the cluster DNS (no dnsPolicy change)."""
    pod = desired.daemon_set(domain(), settings(), "t")["spec"]["template"]["spec"]
    assert pod["dnsConfig"] == {"options": [{"name": "ndots", "value": "1"}]}
    assert "dnsPolicy" not in pod and "hostNetwork" not in pod


def test_daemon_pods_reserve_the_imex_ports_from_the_ephemeral_range():
    """50000 and 50005 lie in Linux's ephemeral port range: reserved in the pod's network
    namespace (a safe sysctl), the daemon's own API connections can never take the port that
    nvidia-imex is about to bind (which would block it for good)."""
    pod = desired.daemon_set(domain(), settings(), "t")["spec"]["template"]["spec"]
    assert pod["securityContext"]["sysctls"] == [{"name": "net.ipv4.ip_local_reserved_ports", "value": "50000,50005"}]


def test_daemon_pods_are_guaranteed_qos_with_priority_class():
    ds = desired.daemon_set(domain(), settings(daemon_cpu="250m", daemon_memory="128Mi",
                                               daemon_priority_class="imex-critical"), "t")
    pod = ds["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "250m", "memory": "128Mi"}
    assert pod["priorityClassName"] == "imex-critical"
    # By default (as upstream) the daemon is not capped: no requests or limits at all.
    default = desired.daemon_set(domain(), settings(), "t")["spec"]["template"]["spec"]["containers"][0]
    assert set(default["resources"]) == {"claims"}
    no_class = desired.daemon_set(domain(), settings(daemon_priority_class=""), "t")
    assert "priorityClassName" not in no_class["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in no_class["spec"]["template"]["spec"]


def test_values_are_quoted_safely():
    # A template name that YAML would otherwise read as a number/bool stays a string.
    obj = desired.workload_claim_template(domain(template="123"), settings())
    assert obj["metadata"]["name"] == "123"
    ds = desired.daemon_set(domain(), settings(daemon_image="img: {weird}"), "t")
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == "img: {weird}"


def test_host_managed_domain_gets_only_the_workload_template():
    host = desired.desired_objects(domain("All"), settings(host_managed=True))
    assert host.daemon_template is None and host.daemon_set is None
    assert host.workload_template["metadata"]["name"] == "imex-channel-0"
    driver = desired.desired_objects(domain(), settings())
    assert driver.daemon_set["spec"]["template"]["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"] == driver.daemon_template["metadata"]["name"]


def test_ownership_is_by_domain_label():
    obj = desired.workload_claim_template(domain(), settings())
    assert desired.owned_by(obj, UID)
    assert not desired.owned_by(obj, "other-uid")
    assert not desired.owned_by({"metadata": {"name": "x"}}, UID)
    assert desired.has_finalizer(obj) and not desired.is_terminating(obj)


def test_daemon_pods_serve_metrics_on_their_pod_ip_and_are_annotated_for_prometheus():
    ds = desired.daemon_set(domain(), settings(), "t")
    template = ds["spec"]["template"]
    (container,) = template["spec"]["containers"]
    env = _env(container)
    names = [e["name"] for e in container["env"]]
    # $(POD_IP) expands only after POD_IP is defined
    assert env["HTTP_ENDPOINT"] == "$(POD_IP):8082" and names.index("POD_IP") < names.index("HTTP_ENDPOINT")
    assert container["ports"] == [{"name": "metrics", "containerPort": 8082, "protocol": "TCP"}]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "8082", "prometheus.io/path": "/metrics"}


def _assert_probe_timings(container: dict, initial_delay: int = 0) -> None:
    """The daemon probes' periods and thresholds, whichever way they are answered."""
    timings = {probe: {k: container[probe][k] for k in ("periodSeconds", "timeoutSeconds", "failureThreshold",
                                                        "successThreshold")}
               for probe in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert timings == {
        "startupProbe": {"periodSeconds": 1, "timeoutSeconds": 10, "failureThreshold": 1200, "successThreshold": 1},
        "livenessProbe": {"periodSeconds": 60, "timeoutSeconds": 10, "failureThreshold": 20, "successThreshold": 1},
        "readinessProbe": {"periodSeconds": 10, "timeoutSeconds": 10, "failureThreshold": 1, "successThreshold": 1}}
    assert container["startupProbe"]["initialDelaySeconds"] == initial_delay


def test_daemon_metrics_port_0_turns_the_endpoint_and_annotations_off():
    ds = desired.daemon_set(domain(), settings(daemon_metrics_port=0), "t")
    template = ds["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert _env(container)["HTTP_ENDPOINT"] == ""  # the daemon's own default would serve
    assert "ports" not in container and "annotations" not in template["metadata"]
    # no endpoint to probe: kubelet runs `check` in the container, as before
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["exec"]["command"] == ["cdriver", "imex-daemon", "check"]
        assert "httpGet" not in container[probe]
        # the check answers (even slowly) before kubelet abandons the probe
        assert CHECK_TIMEOUT < container[probe]["timeoutSeconds"]
    # The startup probe waits for READY within its timeout: no failure recorded while starting.
    startup = container["startupProbe"]
    assert startup["exec"]["command"] == ["cdriver", "imex-daemon", "check", "--wait", "8"]
    assert 8 < startup["timeoutSeconds"]
    _assert_probe_timings(container)
    assert settings(daemon_metrics_port=70000).problems() == [
        "--daemon-metrics-port 70000 is not a port: use 1..65535, or 0 for no metrics endpoint (default 8082)"]
