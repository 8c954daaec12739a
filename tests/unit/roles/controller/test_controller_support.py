"""Controller support pieces: settings validation, durations, endpoints, cache trimming,
the read-your-writes overlay, cached template rendering, orphan detection."""

from __future__ import annotations

import click
import pytest

from cdriver.api import constants
from cdriver.roles.controller import desired
from cdriver.roles.controller.cleanup import objects_of, orphan_domains
from cdriver.roles.controller.cli import parse_duration
from cdriver.roles.controller.metrics import CacheViews, ControllerMetrics, parse_endpoint
from cdriver.roles.controller.overlay import Overlay
from cdriver.roles.controller.reconciler import domain_index, domain_target_index, parse_domain
from cdriver.roles.controller.settings import ControllerSettings, split_names
from cdriver.roles.controller.trim import (
    TrimmingClient,
    metadata_only,
    pod_summary,
    without_managed_fields,
)

# --- settings / flags ------------------------------------------------------------------------

def test_default_settings_are_valid():
    assert ControllerSettings().problems() == []


@pytest.mark.parametrize("field,value,needle", [
    ("namespace", "Bad_NS", "--namespace"),
    ("daemon_image", " ", "--daemon-image"),
    ("image_pull_secrets", ("ok", "Not OK"), "--daemon-image-pull-secrets"),
    ("max_nodes_per_imex_domain", 0, "--max-nodes-per-imex-domain"),
    ("daemon_priority_class", "UPPER", "--daemon-priority-class"),
    ("daemon_cpu", "a lot", "--daemon-cpu"),
    ("daemon_memory", "12XB", "--daemon-memory"),
])
def test_each_bad_setting_is_named_with_its_flag(field, value, needle):
    problems = ControllerSettings(**{field: value}).problems()
    assert len(problems) == 1 and needle in problems[0]


@pytest.mark.parametrize("quantity", ["100m", "1", "0.5", "256Mi", "1G", "1e3", "2Gi"])
def test_quantities_accepted(quantity):
    assert ControllerSettings(daemon_cpu=quantity, daemon_memory=quantity).problems() == []


def test_split_names():
    assert split_names(" a, b ,,c  d ") == ("a", "b", "c", "d")
    assert split_names("") == ()


@pytest.mark.parametrize("text,seconds", [("15s", 15), ("1m30s", 90), ("500ms", 0.5),
                                          ("2", 2), ("1h", 3600), ("0.2s", 0.2)])
def test_durations(text, seconds):
    assert parse_duration(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5x", "-1", "0s", "1m 2s"])
def test_bad_durations(text):
    with pytest.raises(click.BadParameter):
        parse_duration(text, "--x")


@pytest.mark.parametrize("text,expected", [(":8080", ("0.0.0.0", 8080)),
                                           ("127.0.0.1:0", ("127.0.0.1", 0)),
                                           ("[::1]:9", ("::1", 9))])
def test_endpoints(text, expected):
    assert parse_endpoint(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:port", ":70000"])
def test_bad_endpoints(text):
    with pytest.raises(ValueError, match="--http-endpoint"):
        parse_endpoint(text)


def test_metrics_render_domain_counts_and_queue_depth():
    metrics = ControllerMetrics()
    metrics.bind(lambda: {constants.STATUS_READY: 3, "": 1}, lambda: 7)
    metrics.write("create", "daemonsets")
    text = metrics.render().decode()
    assert 'nvidia_dra_compute_domain_info{status="Ready"} 3.0' in text
    assert 'nvidia_dra_compute_domain_info{status="NotReady"} 0.0' in text
    assert "cdriver_controller_queue_depth 7.0" in text
    assert 'cdriver_controller_api_writes_total{resource="daemonsets",verb="create"} 1.0' in text


def test_metrics_read_per_domain_readiness_daemons_and_stale_labels_from_the_caches():
    ready = {"metadata": {"namespace": "a", "name": "one"}, "status": {"status": constants.STATUS_READY}}
    fresh = {"metadata": {"namespace": "b", "name": "two"}}
    metrics = ControllerMetrics()
    metrics.bind(CacheViews(domain_counts=lambda: {constants.STATUS_READY: 1}, domains=lambda: [ready, fresh],
                            daemon_counts=lambda: {constants.STATUS_READY: 4, constants.STATUS_NOT_READY: 1},
                            stale_node_labels=lambda: 2), lambda: 0)
    metrics.node_labels_removed.inc()
    text = metrics.render().decode()
    assert 'cdriver_controller_compute_domain_ready{domain_name="one",domain_namespace="a"} 1.0' in text
    assert 'cdriver_controller_compute_domain_ready{domain_name="two",domain_namespace="b"} 0.0' in text
    assert 'cdriver_controller_clique_daemons{status="Ready"} 4.0' in text
    assert 'cdriver_controller_clique_daemons{status="NotReady"} 1.0' in text
    assert "cdriver_controller_stale_node_labels 2.0" in text
    assert "cdriver_controller_node_labels_removed_total 1.0" in text


# --- trimming ------------------------------------------------------------------------------

DS = {"apiVersion": "apps/v1", "kind": "DaemonSet",
      "metadata": {"name": "d", "namespace": "n", "uid": "x", "resourceVersion": "5",
                   "labels": {constants.LABEL_COMPUTE_DOMAIN: "u"}, "finalizers": [constants.FINALIZER],
                   "annotations": {"a": "b"}, "managedFields": [{"manager": "m"}]},
      "spec": {"template": {}}, "status": {"numberReady": 1}}


def test_trim_keeps_what_the_controller_reads():
    slim = metadata_only(DS)
    assert slim == {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
        "name": "d", "namespace": "n", "uid": "x", "resourceVersion": "5",
        "labels": {constants.LABEL_COMPUTE_DOMAIN: "u"}, "finalizers": [constants.FINALIZER]}}
    full = without_managed_fields(DS)
    assert "managedFields" not in full["metadata"] and full["spec"] == DS["spec"]
    assert full["metadata"]["annotations"] == {"a": "b"}
    assert "managedFields" in DS["metadata"]  # the input is not modified
    pod = pod_summary({"metadata": {"name": "p", "labels": {"a": "b"}},
                       "spec": {"nodeName": "n1", "containers": [{}]},
                       "status": {"podIP": "1.2.3.4", "conditions": [], "hostIP": "h"}})
    assert pod["spec"] == {"nodeName": "n1"}
    assert pod["status"] == {"podIP": "1.2.3.4", "conditions": []}


class _FakeStream:
    def __init__(self, events):
        self.events, self.closed = events, False

    def __iter__(self):
        return iter(self.events)

    def close(self):
        self.closed = True


class _FakeRaw:
    server = "https://x"

    def list(self, res, *a, **kw):
        return {"items": [DS], "metadata": {"resourceVersion": "9"}}

    def watch(self, res, *a, **kw):
        return _FakeStream([("MODIFIED", DS), ("BOOKMARK", {"metadata": {"resourceVersion": "10"}})])


def test_trimming_client_trims_lists_and_watch_events():
    client = TrimmingClient(_FakeRaw(), metadata_only)
    listed = client.list(None)
    assert listed["metadata"]["resourceVersion"] == "9" and "spec" not in listed["items"][0]
    stream = client.watch(None)
    events = list(stream)
    assert events[0][0] == "MODIFIED" and "spec" not in events[0][1]
    assert events[1] == ("BOOKMARK", {"metadata": {"resourceVersion": "10"}})
    stream.close()
    assert stream.closed and client.server == "https://x"


# --- overlay ---------------------------------------------------------------------------------

def obj(name: str, rv: int, uid: str = "u") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv),
                         "labels": {constants.LABEL_COMPUTE_DOMAIN: uid}}}


def test_overlay_prefers_the_newer_copy():
    overlay = Overlay()
    overlay.record("ds", obj("a", 10))
    assert overlay.resolve("ds", "ns/a", None)["metadata"]["resourceVersion"] == "10"
    assert overlay.resolve("ds", "ns/a", obj("a", 9))["metadata"]["resourceVersion"] == "10"
    assert overlay.resolve("ds", "ns/a", obj("a", 11))["metadata"]["resourceVersion"] == "11"
    assert len(overlay) == 0  # the informer caught up: forgotten


def test_overlay_merge_adds_our_objects_not_cached_yet_for_the_domain():
    overlay = Overlay()
    overlay.record("ds", obj("mine", 5, "u1"))
    overlay.record("ds", obj("other", 5, "u2"))
    names = [o["metadata"]["name"] for o in overlay.merge("ds", [obj("cached", 3, "u1")], "u1")]
    assert sorted(names) == ["cached", "mine"]
    assert [o["metadata"]["name"] for o in overlay.merge("ds", [], None)] == []
    overlay.observe("ds", obj("mine", 5, "u1"))
    assert [o["metadata"]["name"] for o in overlay.merge("ds", [], "u1")] == []


def test_overlay_tombstone_hides_a_deleted_object_until_the_informer_drops_it():
    overlay = Overlay()
    overlay.record_gone("ds", "ns/a", obj("a", 7))
    assert overlay.resolve("ds", "ns/a", obj("a", 7)) is None
    assert overlay.resolve("ds", "ns/a", obj("a", 8))["metadata"]["resourceVersion"] == "8"
    overlay.record_gone("ds", "ns/b", obj("b", 7))
    overlay.observe_deleted("ds", obj("b", 7))
    assert overlay.resolve("ds", "ns/b", None) is None and len(overlay) == 0


def test_overlay_entries_expire():
    now = [0.0]
    overlay = Overlay(ttl=10, clock=lambda: now[0])
    overlay.record("ds", obj("a", 10))
    now[0] = 11.0
    assert overlay.resolve("ds", "ns/a", None) is None


# --- rendering, indexes, orphans --------------------------------------------------------------

def _cd(uid: str, template: str):
    return parse_domain({"apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
                         "metadata": {"name": "n", "namespace": "ns", "uid": uid},
                         "spec": {"channel": {"resourceClaimTemplate": {"name": template}}}})


def test_cached_rendering_equals_a_fresh_render_and_never_mixes_domains():
    settings = ControllerSettings(feature_gates_env="X=true,")
    first = desired.daemon_set(_cd("u-1", "t1"), settings, "claim-1")
    second = desired.daemon_set(_cd("u-2", "t2"), settings, "claim-2")
    assert first["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] == "u-1"
    assert second["metadata"]["name"] == "computedomain-daemon-u-2"
    assert second["spec"]["template"]["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"] == "claim-2"
    assert "u-1" not in repr(second)
    static = dict(desired._common(constants.TARGET_WORKLOAD), request_name="channel",
                  device_class=constants.DEVICE_CLASS_DEFAULT_CHANNEL, config_kind=constants.KIND_CHANNEL_CONFIG)
    direct = desired.render(desired.WORKLOAD_TEMPLATE, domain_uid="u-3", name="t<&>'3", namespace="ns",
                            allocation_mode="All", domain_selector=constants.channel_domain_selector("u-3"), **static)
    cached = desired.render_cached(desired.WORKLOAD_TEMPLATE, {"domain_uid": "u-3", "name": "t<&>'3",
                                                               "namespace": "ns", "allocation_mode": "All",
                                                               "domain_selector": constants.channel_domain_selector(
                                                                   "u-3")}, **static)
    assert cached == direct


def test_indexes_and_orphans():
    rct = {"metadata": {"labels": {constants.LABEL_COMPUTE_DOMAIN: "u1", constants.LABEL_TARGET: "Workload"}}}
    assert domain_target_index(rct) == ["u1/Workload"]
    assert domain_index(rct) == ["u1"]
    clique = {"kind": constants.KIND_COMPUTE_DOMAIN_CLIQUE, "metadata": {"name": "u9.c.0"}}
    assert domain_index(clique) == ["u9"]
    assert domain_index({"metadata": {"name": "x"}}) == []
    objs = [rct, {"metadata": {"labels": {constants.LABEL_COMPUTE_DOMAIN: "u2"}}}, {"metadata": {}}]
    assert orphan_domains({"u1"}, objs) == {"u2"}
    assert objects_of("u1", objs) == [rct]
