"""Bad input, fuzzed: every parser and validator a user's or a node's data reaches.

Each input either parses or is refused with the input's own error type, naming the field (or
line, or file) and what to do; no other exception escapes, nothing is lost silently, and no
file is changed because of it. Hypothesis generates the cases (seeded by the test id, so a
run repeats); each test records how many it tried.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdriver.api import constants
from cdriver.api.types import ChannelConfig, ComputeDomain, DaemonConfig, ValidationError, decode_opaque_config
from cdriver.checkpoint import (
    MAX_CHECKPOINT_BYTES,
    CheckpointError,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
    checksum,
)
from cdriver.imex.config import ImexConfig, ImexConfigError, parse_config, parse_nodes_config, render_nodes_config
from cdriver.kube.config import KubeConfigError, read_kubeconfig, settings_from_kubeconfigs
from cdriver.sim.gpu.topology import TopologyError, loads_topology, parse_topology
from tests.reliability.figures import record, size

EXAMPLES = size(150, 1500)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# -- values ---------------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=80), st.sampled_from(["", " ", "..", "../x", "/etc", "a/b", "\x00", "Ω" * 70]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                           max_leaves=12)


class Tally:
    """Counts the cases one property ran: those that ended as a clear refusal or a parse
    survived; those where an assertion failed or an exception escaped are lost. Every example
    hypothesis runs counts, shrinking a failure included, and the row is recorded even when the
    property fails (so a failing run prints its losses)."""

    def __init__(self) -> None:
        self.tried = 0
        self.refused = 0
        self.lost = 0

    def counted(self, cases: int = 1) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """Count each call of the decorated check as `cases` cases (lost if it raises)."""
        def decorate(check: Callable[..., None]) -> Callable[..., None]:
            @functools.wraps(check)
            def counting(*args: Any, **kwargs: Any) -> None:
                self.tried += cases
                refused = self.refused
                try:
                    check(*args, **kwargs)
                except BaseException:
                    self.refused = refused  # a lost case is neither refused nor parsed
                    self.lost += cases
                    raise
            return counting
        return decorate

    def report(self, test: str, what: str) -> None:
        survived = self.tried - self.lost
        record(test, what, self.tried, survived, refused=self.refused, parsed=survived - self.refused)


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a JSON document (lists by index)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += paths(value, (*prefix, i))
    return out


def mutate(doc: Any, path: tuple, action: str, value: Any) -> Any:
    """A copy of `doc` with the value at `path` replaced, removed, or given an unknown sibling."""
    out = copy.deepcopy(doc)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "remove" and isinstance(parent, dict):
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent["unexpectedField"] = value
    else:
        parent[last] = value
    return out


def mutations(doc: dict) -> st.SearchStrategy:
    return st.tuples(st.sampled_from(paths(doc)), st.sampled_from(["replace", "remove", "add"]), json_values)


def named_field(message: str, path: tuple) -> bool:
    """The message names the mutated field, one of its parents, or the unknown field added."""
    dotted = [".".join(str(p) for p in path[:i]) for i in range(len(path), 0, -1)]
    names = [*dotted, "unexpectedField", "(top level)"]
    return any(re.search(rf"field {re.escape(n)}(\b|\.|\[|:)", message) for n in names) or \
        any(f"field {n.split('.')[0]}" in message for n in dotted)


# -- ComputeDomain specs ----------------------------------------------------------------------
VALID_CD = {
    "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
    "metadata": {"name": "cd", "namespace": "ns", "uid": "0f1e2d3c-0000-4000-8000-00000000abcd"},
    "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "cd-channel"},
                                        "allocationMode": constants.ALLOCATION_MODE_SINGLE}},
    "status": {"status": constants.STATUS_READY, "nodes": [
        {"name": "node-a", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"}]},
}


def test_compute_domain_specs_parse_or_name_the_field() -> None:
    tally = Tally()

    @FUZZ
    @given(mutations(VALID_CD))
    @tally.counted()
    def check(change: tuple) -> None:
        path, action, value = change
        doc = mutate(VALID_CD, path, action, value)
        before = copy.deepcopy(doc)
        try:
            cd = ComputeDomain.from_dict(doc)
        except ValidationError as exc:
            tally.refused += 1
            message = str(exc)
            assert message.startswith(f"{constants.KIND_COMPUTE_DOMAIN}"), message
            assert named_field(message, path), f"{message!r} does not name {path}"
        else:
            assert cd.channel_template_name, "an empty template name was accepted"
            assert cd.num_nodes >= 0
            assert cd.allocation_mode in constants.ALLOCATION_MODES
        assert doc == before, "decoding changed its input"

    try:
        check()
    finally:
        tally.report("fuzz", "ComputeDomain spec")


# -- opaque configs ---------------------------------------------------------------------------
VALID_CONFIGS = [
    {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": "uid-1",
     "allocationMode": constants.ALLOCATION_MODE_ALL},
    {"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": "uid-1"},
]


def safe_component(domain_id: str, base: Path) -> bool:
    """A domainID joined under a directory stays one level below it."""
    joined = Path(os.path.normpath(base / domain_id))
    return joined.parent == base and joined.name == domain_id


@pytest.mark.parametrize("valid", VALID_CONFIGS, ids=["channel", "daemon"])
def test_opaque_configs_parse_or_name_the_field(valid: dict) -> None:
    tally = Tally()
    domain_ids = st.one_of(st.text(max_size=70), st.from_regex(r"[A-Za-z0-9._/\\-]{0,70}", fullmatch=True),
                           st.sampled_from(["..", "../other", "/abs", "a/../b", ".", "a" * 64, "-x", "x."]))

    @FUZZ
    @given(st.one_of(mutations(valid), st.tuples(st.just(("domainID",)), st.just("replace"), domain_ids)))
    @tally.counted()
    def check(change: tuple) -> None:
        path, action, value = change
        try:
            config = decode_opaque_config(mutate(valid, path, action, value))
        except ValidationError as exc:
            tally.refused += 1
            message = str(exc)
            assert named_field(message, path) or "field kind" in message or "expected an object" in message, message
        else:
            assert isinstance(config, ChannelConfig | DaemonConfig)
            base = Path("/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains")
            assert safe_component(config.domain_id, base), f"domainID {config.domain_id!r} escapes {base}"

    try:
        check()
    finally:
        tally.report("fuzz", f"opaque {valid['kind']}")


# -- checkpoint files -------------------------------------------------------------------------
BOOT = "11111111-aaaa-4bbb-8ccc-000000000001"


def written_checkpoint(path: Path) -> dict[str, dict]:
    store = CheckpointStore(path, boot_id=BOOT)
    with store.locked() as cp:
        for i in range(3):
            cp.claims[f"uid-{i}"] = ClaimRecord(uid=f"uid-{i}", name=f"claim-{i}", namespace="ns",
                                                state=ClaimState.PREPARE_COMPLETED,
                                                devices=[{"pool": "node-a", "device": "channel-0"}],
                                                cdi_ids=[f"k8s.compute-domain.nvidia.com/claim=uid-{i}"],
                                                domain_id="dom-1", kind="channel", updated=1.0)
    return {uid: rec.to_dict() for uid, rec in store.read().claims.items()}


def directory(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file() and p.name != "pu.lock"}


def assert_refused_and_untouched(path: Path, want: dict[str, dict]) -> bool:
    """The store reads the same claims, or refuses the file naming it and the recovery; either
    way (a write attempted too) no file in the directory changes. True when refused."""
    before = directory(path.parent)
    store = CheckpointStore(path, boot_id=BOOT)
    refused = False
    try:
        got = {uid: rec.to_dict() for uid, rec in store.read().claims.items()}
    except CheckpointError as exc:
        refused = True
        # names the file and the recovery: a plugin restart moves it aside and rebuilds, deleting nothing
        assert str(path) in str(exc) and "restart the kubelet plugin" in str(exc), str(exc)
        assert "moves the file aside" in str(exc) and "deleting none" in str(exc), str(exc)
        with pytest.raises(CheckpointError):
            with store.locked() as cp:
                cp.claims["new"] = ClaimRecord(uid="new")
    else:
        assert got == want, "a damaged checkpoint was read as different claims"
    assert directory(path.parent) == before, "a file was changed, created or deleted"
    return refused


def damage_cases() -> st.SearchStrategy:
    truncate = st.tuples(st.just("truncate"), st.integers(0, 10_000))
    garbage = st.tuples(st.just("garbage"), st.binary(max_size=300))
    flip = st.tuples(st.just("flip"), st.tuples(st.integers(0, 10_000), st.integers(1, 255)))
    version = st.tuples(st.just("version"), json_values.filter(lambda v: v != 1 or isinstance(v, bool)))
    bad_sum = st.tuples(st.just("checksum"), st.one_of(st.text(max_size=70), json_values))
    return st.one_of(truncate, garbage, flip, version, bad_sum)


def damaged(data: bytes, case: tuple) -> bytes:
    kind, arg = case
    if kind == "truncate":
        return data[: arg % len(data)]
    if kind == "garbage":
        return arg
    if kind == "flip":
        offset, xor = arg
        out = bytearray(data)
        out[offset % len(out)] ^= xor
        return bytes(out)
    doc = json.loads(data)
    section = doc["cdriver"]
    if kind == "version":
        section["version"] = arg
        body = {k: v for k, v in section.items() if k != "checksum"}
        try:
            section["checksum"] = checksum(body)  # a well-formed file of another version
        except ValueError:  # the version is not JSON (inf): the file is garbage anyway
            section["checksum"] = "0" * 64
    else:
        section["checksum"] = arg
    return json.dumps(doc).encode()


def test_damaged_checkpoints_are_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    want = written_checkpoint(path)
    original = path.read_bytes()
    tally = Tally()

    @FUZZ
    @given(damage_cases())
    @tally.counted()
    def check(case: tuple) -> None:
        path.write_bytes(damaged(original, case))
        tally.refused += assert_refused_and_untouched(path, want)

    try:
        check()
    finally:
        tally.report("fuzz", "checkpoint file")


def test_a_huge_checkpoint_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    want = written_checkpoint(path)
    with open(path, "ab") as handle:
        handle.truncate(MAX_CHECKPOINT_BYTES + 10)
    assert assert_refused_and_untouched(path, want)
    record("fuzz", "checkpoint file over the size limit", 1, 1)


# -- topology documents -----------------------------------------------------------------------
VALID_TOPOLOGY = {"version": 1, "domains": [
    {"name": "d", "uuid": "00000000-0000-0000-0000-0000000000ab",
     "cliques": [{"id": 0, "nodes": ["node-a", "node-b"]}, {"id": 1, "nodes": ["node-c"]}]}]}


def test_topology_documents_parse_or_say_where() -> None:
    tally = Tally()
    text_cases = st.one_of(st.text(max_size=300), st.just("{"), st.just("version: [1"), st.just("- a\n- b"))

    @FUZZ
    @given(st.one_of(mutations(VALID_TOPOLOGY).map(lambda c: ("doc", c)), text_cases.map(lambda t: ("text", t))))
    @tally.counted()
    def check(case: tuple) -> None:
        kind, arg = case
        try:
            if kind == "doc":
                topo = parse_topology(mutate(VALID_TOPOLOGY, *arg), "topo.yaml")
            else:
                topo = loads_topology(arg, "topo.yaml")
        except TopologyError as exc:
            tally.refused += 1
            assert str(exc).startswith("topo.yaml"), str(exc)
        else:
            names = topo.nodes()
            assert len(names) == len(set(names)), f"a node is in two cliques: {names}"

    try:
        check()
    finally:
        tally.report("fuzz", "topology document")


# -- IMEX config inputs -----------------------------------------------------------------------
IMEX_KEYS = ["SERVER_PORT", "BIND_INTERFACE_IP", "IMEX_CMD_ENABLED", "IMEX_CMD_BIND_INTERFACE_IP", "IMEX_CMD_PORT",
             "IMEX_CMD_UNIX_DOMAIN_PATH", "LOG_APPEND_TO_LOG", "IMEX_NODE_CONFIG_FILE", "LOG_FILE_NAME"]


def test_imex_config_inputs_parse_or_name_the_line_or_key() -> None:
    tally = Tally()
    lines = st.lists(st.one_of(st.text(max_size=40), st.tuples(st.sampled_from(IMEX_KEYS), st.text(max_size=30))
                               .map(lambda kv: f"{kv[0]}={kv[1]}")), max_size=8)
    values = st.dictionaries(st.sampled_from(IMEX_KEYS), st.one_of(st.text(max_size=30), st.from_regex(
        r"-?[0-9]{1,7}|[0-9.]{1,20}|true|false|0|1", fullmatch=True)), max_size=6)
    hosts = st.lists(st.text(max_size=20), max_size=6)

    @FUZZ
    @given(lines, values, hosts)
    @tally.counted(3)
    def check(config_lines: list[str], config_values: dict[str, str], peers: list[str]) -> None:
        text = "\n".join(config_lines)
        try:
            parsed = parse_config(text, source="imex.cfg")
        except ImexConfigError as exc:
            tally.refused += 1
            assert str(exc).startswith("imex.cfg: line "), str(exc)
        else:
            assert all("\n" not in v for v in parsed.values())
        try:
            ImexConfig.from_values(config_values, source="imex.cfg")
        except ImexConfigError as exc:
            tally.refused += 1
            assert any(key in str(exc) for key in config_values), str(exc)
        try:
            rendered = render_nodes_config(peers)
        except ImexConfigError as exc:
            tally.refused += 1
            assert "nodes config entry" in str(exc), str(exc)
        else:
            assert parse_nodes_config(rendered) == peers, "a peer list does not survive its own nodes config"

    try:
        check()
    finally:
        tally.report("fuzz", "IMEX config, values, nodes config")


# -- kubeconfigs ------------------------------------------------------------------------------
VALID_KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "c",
    "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "QUJD"}}],
    "users": [{"name": "u", "user": {"client-certificate-data": "QUJD", "client-key-data": "QUJD"}}],
    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
}


def test_kubeconfigs_resolve_or_name_the_file(tmp_path: Path) -> None:
    tally = Tally()
    path = tmp_path / "kubeconfig"
    text_cases = st.one_of(st.text(max_size=200), st.binary(max_size=100).map(lambda b: b.decode("latin-1")))

    servers = st.one_of(st.text(max_size=40), st.sampled_from(["https://[::1", "https://[::1]:6443", "https://h:70000",
                                                               "https://h:-1", "http://h:port", "https://", "h:1"]),
                        st.from_regex(r"https?://[\[\]a-z0-9.:]{0,20}(:-?[0-9]{0,7})?", fullmatch=True))
    server_path = ("clusters", 0, "cluster", "server")

    @FUZZ
    @given(st.one_of(mutations(VALID_KUBECONFIG).map(lambda c: ("doc", c)), text_cases.map(lambda t: ("text", t)),
                     servers.map(lambda s: ("doc", (server_path, "replace", s)))))
    @tally.counted()
    def check(case: tuple) -> None:
        kind, arg = case
        content = yaml.safe_dump(mutate(VALID_KUBECONFIG, *arg)) if kind == "doc" else arg
        path.write_bytes(content.encode("utf-8", "surrogatepass"))
        try:
            settings = settings_from_kubeconfigs([(str(path), read_kubeconfig(str(path)))])
        except KubeConfigError as exc:
            tally.refused += 1
            assert str(path) in str(exc), str(exc)
        else:
            assert settings.server.startswith(("http://", "https://"))
            assert urlsplit(settings.server).hostname, settings.server
            assert urlsplit(settings.server).port in (None, *range(65536)), settings.server  # raises if not a port
        assert path.read_bytes() == content.encode("utf-8", "surrogatepass"), "the kubeconfig was changed"

    try:
        check()
    finally:
        tally.report("fuzz", "kubeconfig")

