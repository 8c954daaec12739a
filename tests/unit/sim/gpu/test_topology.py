"""Topology documents: loading, validation errors, node identities, clique labels."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cdriver.errors import CdriverError
from cdriver.sim.gpu.topology import (
    NodeIdentity,
    TopologyError,
    canonical_uuid,
    clique_label,
    demo_topology_path,
    dumps_topology,
    load_topology,
    loads_topology,
    parse_topology,
)

DEMO_UUID = "00000000-0000-0000-0000-0000000000ab"


def _doc(**domain_overrides: object) -> dict:
    domain = {"name": "d", "uuid": DEMO_UUID, "cliques": [{"id": 0, "nodes": ["n1", "n2"]}]}
    domain.update(domain_overrides)
    return {"version": 1, "domains": [domain]}


def test_demo_topology_has_four_nodes_in_two_cliques() -> None:
    topo = load_topology(demo_topology_path())
    assert topo.nodes() == ["worker-1", "worker-2", "worker-3", "worker-4"]
    assert [clique_label(topo.identity(n)) for n in topo.nodes()] == [
        f"{DEMO_UUID}.0", f"{DEMO_UUID}.0", f"{DEMO_UUID}.1", f"{DEMO_UUID}.1"]
    assert topo.identity("worker-3") == NodeIdentity("worker-3", DEMO_UUID, 1, "demo-domain")


def test_identity_of_unknown_node_names_known_nodes() -> None:
    topo = parse_topology(_doc(), "t.yaml")
    with pytest.raises(TopologyError, match=r"'n9' is not in any clique; known nodes: n1, n2"):
        topo.identity("n9")
    assert topo.find("n9") is None
    with pytest.raises(TopologyError, match="NODE_NAME"):
        topo.identity("")


def test_uuid_is_canonicalised_from_bare_or_uppercase_hex() -> None:
    topo = parse_topology(_doc(uuid="00000000000000000000000000000ABC"))
    assert topo.domains[0].uuid == "00000000-0000-0000-0000-000000000abc"
    assert canonical_uuid("00000000-0000-0000-0000-0000000000AB") == DEMO_UUID


def test_yaml_and_json_give_the_same_topology(tmp_path: Path) -> None:
    data = _doc()
    (tmp_path / "t.json").write_text(json.dumps(data, indent="\t"))
    (tmp_path / "t.yaml").write_text(dumps_topology(parse_topology(data)))
    from_json = load_topology(tmp_path / "t.json")
    from_yaml = load_topology(tmp_path / "t.yaml")
    assert from_json.domains == from_yaml.domains
    assert from_json.identity("n2").clique_id == 0


def test_version_defaults_to_one() -> None:
    data = _doc()
    del data["version"]
    assert parse_topology(data).version == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["domains"][0]["cliques"].append({"id": 1, "nodes": ["n2"]}),
         r"domains\[0\]\.cliques\[1\]\.nodes\[0\]: duplicate node 'n2', already listed at "
         r"domains\[0\]\.cliques\[0\]\.nodes\[1\]"),
        (lambda d: d["domains"][0].update(uuid="not-a-uuid"), r"domains\[0\]\.uuid: 'not-a-uuid' is not a UUID"),
        (lambda d: d["domains"][0].update(uuid="0000-ab"), r"is not a UUID; write 32 hex digits"),
        (lambda d: d["domains"][0].update(uuid=12), r"domains\[0\]\.uuid: expected a UUID string"),
        (lambda d: d["domains"][0]["cliques"][0].update(id="1"),
         r"cliques\[0\]\.id: expected an integer clique ID 0\.\.4294967295, got string '1'"),
        (lambda d: d["domains"][0]["cliques"][0].update(id=1.5), r"expected an integer clique ID"),
        (lambda d: d["domains"][0]["cliques"][0].update(id=True), r"expected an integer clique ID"),
        (lambda d: d["domains"][0]["cliques"][0].update(id=-1), r"-1 is out of range"),
        (lambda d: d["domains"][0]["cliques"][0].update(id=2**32), r"is out of range"),
        (lambda d: d["domains"][0].update(extra=1), r"domains\[0\]: unknown field 'extra' \(allowed: "
                                                    r"cliques, gpusPerNode, name, profile, uuid"),
        (lambda d: d["domains"][0]["cliques"][0].update(node=["x"]), r"unknown field 'node'"),
        (lambda d: d.update(domain=[]), r"unknown field 'domain'"),
        (lambda d: d.update(version=2), r"version: unsupported value 2"),
        (lambda d: d.update(version="1"), r"version: expected an integer"),
        (lambda d: d.update(domains={}), r"domains: expected a list of domains, got object"),
        (lambda d: d.update(domains=[]), r"domains: empty"),
        (lambda d: d["domains"][0]["cliques"][0].update(nodes="n1"), r"nodes: expected a list of node names"),
        (lambda d: d["domains"][0]["cliques"][0].update(nodes=[]), r"nodes: empty"),
        (lambda d: d["domains"][0]["cliques"][0].update(nodes=["Bad_Name"]), r"not a valid Kubernetes node name"),
        (lambda d: d["domains"][0]["cliques"][0].update(nodes=[7]), r"nodes\[0\]: expected a node name string"),
        (lambda d: d["domains"][0]["cliques"].append({"id": 0, "nodes": ["n3"]}), r"clique 0 appears twice"),
        (lambda d: d["domains"][0]["cliques"][0].pop("id"), r"missing key id"),
        (lambda d: d["domains"][0].pop("uuid"), r"missing key uuid"),
        (lambda d: d["domains"].append(dict(d["domains"][0], cliques=[{"id": 0, "nodes": ["n3"]}])),
         r"domains\[1\]\.uuid: .* is already used by domains\[0\]"),
        (lambda d: d["domains"][0].update(name=3), r"domains\[0\]\.name: expected a string"),
    ],
)
def test_invalid_documents_are_rejected_naming_the_field(mutate, message: str) -> None:
    data = _doc()
    mutate(data)
    with pytest.raises(TopologyError, match=message) as info:
        parse_topology(data, "topo.yaml")
    assert str(info.value).startswith("topo.yaml")
    assert isinstance(info.value, CdriverError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 1\ndomains: [\n", r"t\.yaml:\d+:\d+: not valid YAML/JSON"),
        ("version: 1\nversion: 1\ndomains: []\n", r"t\.yaml:2: duplicate key 'version'"),
        ('{"version": 1, "domains": [}', r"t\.yaml:1:\d+: not valid JSON"),
        ('{"version": 1, "version": 1}', r"duplicate key 'version'"),
        ("", r"the document is empty"),
        ("- 1\n- 2\n", r"expected an object with keys version and domains, got list"),
    ],
)
def test_syntax_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        loads_topology(text, "t.yaml")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"topology file not found"):
        load_topology(tmp_path / "nope.yaml")


def test_dump_round_trips() -> None:
    text = textwrap.dedent(f"""\
        version: 1
        domains:
          - name: spine-1
            uuid: {DEMO_UUID}
            cliques:
              - {{id: 0, nodes: [worker-0]}}
              - {{id: 1, nodes: [worker-1]}}
          - uuid: 00000000-0000-0000-0000-0000000000cd
            cliques:
              - {{id: 0, nodes: [worker-2]}}
        """)
    topo = loads_topology(text)
    assert loads_topology(dumps_topology(topo)).domains == topo.domains
    assert loads_topology(dumps_topology(topo, as_json=True)).domains == topo.domains
    assert clique_label(topo.identity("worker-2")) == "00000000-0000-0000-0000-0000000000cd.0"


# --- racks shaped like the hardware, and the simulation's own GPU keys -------------------

from cdriver.sim.gpu.topology import rack_topology, resolve_topology, shipped_topologies  # noqa: E402


@pytest.mark.parametrize(("name", "profile", "racks"), [
    ("gb200-nvl72", "gb200", 1), ("gb200-nvl72x4", "gb200", 4),
    ("gb300-nvl72", "gb300", 1), ("gb300-nvl72x4", "gb300", 4)])
def test_shipped_racks_are_18_trays_of_4_gpus_one_clique_per_rack(name: str, profile: str, racks: int) -> None:
    topo = load_topology(resolve_topology(name))
    assert topo == rack_topology(profile, racks).__class__(topo.version, rack_topology(profile, racks).domains,
                                                           topo.source)
    assert len(topo.nodes()) == 18 * racks
    assert {len(d.cliques) for d in topo.domains} == {1}
    assert len({d.uuid for d in topo.domains}) == racks  # each rack its own NVLink domain
    assert {(d.profile, d.gpus_per_node) for d in topo.domains} == {(profile, 4)}
    assert topo.nodes()[:2] == ["rack1-tray01", "rack1-tray02"] and topo.nodes()[-1] == f"rack{racks}-tray18"
    found = topo.identity(f"rack{racks}-tray07")
    assert (found.profile, found.gpus_per_node, found.domain) == (profile, 4, f"{profile}-nvl72-rack{racks}")


def test_a_topology_is_named_or_a_path_and_an_unknown_name_lists_the_shipped_ones(tmp_path: Path) -> None:
    assert set(shipped_topologies()) == {"demo", "gb200-nvl72", "gb200-nvl72x4", "gb300-nvl72", "gb300-nvl72x4"}
    assert resolve_topology("demo") == demo_topology_path()
    own = tmp_path / "mine.yaml"
    own.write_text(dumps_topology(parse_topology(_doc())))
    assert resolve_topology(str(own)) == own
    with pytest.raises(TopologyError, match="not a shipped topology; shipped: demo, gb200-nvl72"):
        resolve_topology("gb200-nvl36")


def test_profile_and_gpus_per_node_are_checked_and_round_trip() -> None:
    topo = parse_topology(_doc(profile="gb300", gpusPerNode=4))
    assert parse_topology(topo.to_dict()) == topo
    assert "profile" not in parse_topology(_doc()).to_dict()["domains"][0]
    with pytest.raises(TopologyError, match=r"domains\[0\]\.profile: unknown profile 'h100'; use one of gb200, gb300"):
        parse_topology(_doc(profile="h100"))
    with pytest.raises(TopologyError, match=r"gpusPerNode: 0 is out of range 1\.\.64"):
        parse_topology(_doc(gpusPerNode=0))
    with pytest.raises(TopologyError, match=r"gpusPerNode: expected an integer"):
        parse_topology(_doc(gpusPerNode="4"))
