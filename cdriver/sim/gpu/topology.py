"""Topology document: which simulated node belongs to which NVLink domain and clique.

The document (YAML or JSON) has the shape of the upstream simulation's topology ConfigMap::

    version: 1
    domains:
      - name: demo-domain                                  # optional, informational
        uuid: 00000000-0000-0000-0000-0000000000ab         # cluster UUID of the domain
        profile: gb200                                     # optional: the nodes' GPU profile
        gpusPerNode: 4                                     # optional: default the profile's
        cliques:
          - id: 0                                          # clique ID (uint32)
            nodes: [worker-1, worker-2]                    # Kubernetes node names

A node learns its identity (cluster UUID + clique ID, and its GPUs) from its name (NODE_NAME).
The document is read when a process starts, so rebinding a node only needs a restart.
`profile` and `gpusPerNode` are this simulation's own keys (the upstream ConfigMap has none).

Shipped documents are named (`resolve_topology`): `demo`, and racks shaped like the
hardware: `gb200-nvl72` (one NVL72 rack: 18 compute trays of 4 GPUs in one clique),
`gb200-nvl72x4` (four racks, four cliques, 72 nodes) and their `gb300-` equivalents; their
node names say rack and tray (`rack1-tray01`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cdriver.decoding import (
    DecodeError,
    is_integer,
    strict_json_loads,
    strict_yaml_load,
    unknown_field,
    unknown_fields,
    wrong_type,
)
from cdriver.errors import CdriverError

ENV_SIM_TOPOLOGY = "CDRIVER_SIM_TOPOLOGY"  # topology document of the simulation

TOPOLOGY_VERSION = 1
MAX_CLIQUE_ID = 2**32 - 1

_DASHED_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_BARE_UUID = re.compile(r"^[0-9a-fA-F]{32}$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NODE_NAME = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")

_TOP_KEYS = {"version", "domains"}
_DOMAIN_KEYS = {"name", "uuid", "cliques", "profile", "gpusPerNode"}
#: GPU profiles a domain may name (cdriver.sim.gpu.profiles.PROFILES)
_PROFILE_NAMES = ("gb200", "gb300")
MAX_GPUS_PER_NODE = 64
_CLIQUE_KEYS = {"id", "nodes"}


class TopologyError(CdriverError):
    """The topology document is missing, unreadable or invalid."""


@dataclass(frozen=True)
class Clique:
    """One clique of a domain: an ID and its member nodes."""

    id: int
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Domain:
    """One NVLink fabric domain: a cluster UUID and its cliques."""

    name: str
    uuid: str  # canonical lowercase 8-4-4-4-12
    cliques: tuple[Clique, ...]
    profile: str = ""  # "" : the node's default profile
    gpus_per_node: int | None = None  # None: the profile's count


@dataclass(frozen=True)
class NodeIdentity:
    """What the fabric reports on one node."""

    node_name: str
    cluster_uuid: str  # canonical lowercase 8-4-4-4-12
    clique_id: int
    domain: str
    profile: str = ""  # "" : the node's default profile
    gpus_per_node: int | None = None  # None: the profile's count


@dataclass(frozen=True)
class Topology:
    """A validated topology document."""

    version: int
    domains: tuple[Domain, ...]
    source: str = "<topology>"

    def nodes(self) -> list[str]:
        """Every node name, in document order."""
        return [node for domain in self.domains for clique in domain.cliques for node in clique.nodes]

    def find(self, node_name: str) -> NodeIdentity | None:
        """The identity of `node_name`, or None when the document does not list it."""
        for domain in self.domains:
            for clique in domain.cliques:
                if node_name in clique.nodes:
                    return NodeIdentity(node_name, domain.uuid, clique.id, domain.name, domain.profile,
                                        domain.gpus_per_node)
        return None

    def identity(self, node_name: str) -> NodeIdentity:
        """The identity of `node_name`; raises TopologyError naming the known nodes if absent."""
        if not node_name:
            raise TopologyError(f"{self.source}: no node name given; set NODE_NAME or pass --node")
        found = self.find(node_name)
        if found is None:
            known = ", ".join(self.nodes()) or "(none)"
            raise TopologyError(
                f"{self.source}: node {node_name!r} is not in any clique; known nodes: {known}. "
                "Add it to a clique's nodes list or fix the node name (the match is exact)."
            )
        return found

    def to_dict(self) -> dict[str, Any]:
        """The document as plain data (the inverse of parse_topology)."""
        return {
            "version": self.version,
            "domains": [
                {
                    "name": d.name,
                    "uuid": d.uuid,
                    **({"profile": d.profile} if d.profile else {}),
                    **({"gpusPerNode": d.gpus_per_node} if d.gpus_per_node is not None else {}),
                    "cliques": [{"id": c.id, "nodes": list(c.nodes)} for c in d.cliques],
                }
                for d in self.domains
            ],
        }


def clique_label(identity: NodeIdentity) -> str:
    """The clique label value `<clusterUUID>.<cliqueId>` (as in nvidia.com/gpu.clique)."""
    return f"{identity.cluster_uuid}.{identity.clique_id}"


def canonical_uuid(value: str) -> str | None:
    """`value` as lowercase 8-4-4-4-12 if it is a dashed or bare 32-hex-digit UUID, else None."""
    if _DASHED_UUID.match(value):
        return value.lower()
    if _BARE_UUID.match(value):
        v = value.lower()
        return f"{v[0:8]}-{v[8:12]}-{v[12:16]}-{v[16:20]}-{v[20:32]}"
    return None


def _check_keys(where: str, value: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = unknown_fields(value, allowed)
    if unknown:
        raise TopologyError(f"{where}: {unknown_field(unknown[0], sorted(allowed))}")


def _require(where: str, value: Any, kind: type, expected: str) -> Any:
    if not isinstance(value, kind) or (kind is int and not is_integer(value)):
        raise TopologyError(f"{where}: {wrong_type(expected, value)}")
    return value


def parse_topology(data: Any, source: str = "<topology>") -> Topology:
    """Validate plain data (as loaded from YAML/JSON) into a Topology; raises TopologyError."""
    if not isinstance(data, Mapping):
        raise TopologyError(f"{source}: {wrong_type('an object with keys version and domains', data)}")
    _check_keys(source, data, _TOP_KEYS)
    version = data.get("version", TOPOLOGY_VERSION)
    _require(f"{source}: version", version, int, "an integer")
    if version != TOPOLOGY_VERSION:
        raise TopologyError(f"{source}: version: unsupported value {version}; write version: {TOPOLOGY_VERSION}")
    if "domains" not in data:
        raise TopologyError(f"{source}: missing key domains; list at least one domain")
    domains_raw = _require(f"{source}: domains", data["domains"], list, "a list of domains")

    seen_nodes: dict[str, str] = {}
    seen_uuids: dict[str, str] = {}
    domains: list[Domain] = []
    for d_index, d_raw in enumerate(domains_raw):
        where = f"{source}: domains[{d_index}]"
        _require(where, d_raw, Mapping, "an object with keys name, uuid, cliques")
        _check_keys(where, d_raw, _DOMAIN_KEYS)
        name = d_raw.get("name", "")
        if name is None:
            name = ""
        _require(f"{where}.name", name, str, "a string")
        if "uuid" not in d_raw:
            raise TopologyError(f"{where}: missing key uuid (the domain's cluster UUID)")
        uuid_raw = d_raw["uuid"]
        _require(f"{where}.uuid", uuid_raw, str, "a UUID string such as 00000000-0000-0000-0000-0000000000ab")
        uuid = canonical_uuid(uuid_raw.strip())
        if uuid is None:
            raise TopologyError(
                f"{where}.uuid: {uuid_raw!r} is not a UUID; write 32 hex digits, "
                "e.g. 00000000-0000-0000-0000-0000000000ab"
            )
        if uuid in seen_uuids:
            raise TopologyError(f"{where}.uuid: {uuid} is already used by {seen_uuids[uuid]}; "
                                "give each domain its own cluster UUID")
        seen_uuids[uuid] = f"domains[{d_index}]"
        profile = d_raw.get("profile", "")
        _require(f"{where}.profile", profile, str, f"a GPU profile name ({', '.join(_PROFILE_NAMES)})")
        if profile and profile not in _PROFILE_NAMES:
            raise TopologyError(f"{where}.profile: unknown profile {profile!r}; use one of {', '.join(_PROFILE_NAMES)}")
        gpus = d_raw.get("gpusPerNode")
        if gpus is not None:
            if not is_integer(gpus):
                raise TopologyError(f"{where}.gpusPerNode: {wrong_type('an integer', gpus)}")
            if not 1 <= gpus <= MAX_GPUS_PER_NODE:
                raise TopologyError(f"{where}.gpusPerNode: {gpus} is out of range 1..{MAX_GPUS_PER_NODE}")
        if "cliques" not in d_raw:
            raise TopologyError(f"{where}: missing key cliques; list at least one clique")
        cliques_raw = _require(f"{where}.cliques", d_raw["cliques"], list, "a list of cliques")
        if not cliques_raw:
            raise TopologyError(f"{where}.cliques: empty; list at least one clique")
        cliques: list[Clique] = []
        seen_ids: set[int] = set()
        for c_index, c_raw in enumerate(cliques_raw):
            c_where = f"{where}.cliques[{c_index}]"
            _require(c_where, c_raw, Mapping, "an object with keys id, nodes")
            _check_keys(c_where, c_raw, _CLIQUE_KEYS)
            if "id" not in c_raw:
                raise TopologyError(f"{c_where}: missing key id (an integer clique ID)")
            clique_id = c_raw["id"]
            if not is_integer(clique_id):
                expected = f"an integer clique ID 0..{MAX_CLIQUE_ID}"
                raise TopologyError(f"{c_where}.id: {wrong_type(expected, clique_id)}")
            if not 0 <= clique_id <= MAX_CLIQUE_ID:
                raise TopologyError(f"{c_where}.id: {clique_id} is out of range 0..{MAX_CLIQUE_ID}")
            if clique_id in seen_ids:
                raise TopologyError(f"{c_where}.id: clique {clique_id} appears twice in this domain; "
                                    "merge the two node lists")
            seen_ids.add(clique_id)
            if "nodes" not in c_raw:
                raise TopologyError(f"{c_where}: missing key nodes (a list of node names)")
            nodes_raw = _require(f"{c_where}.nodes", c_raw["nodes"], list, "a list of node names")
            if not nodes_raw:
                raise TopologyError(f"{c_where}.nodes: empty; list at least one node name")
            nodes: list[str] = []
            for n_index, node in enumerate(nodes_raw):
                n_where = f"{c_where}.nodes[{n_index}]"
                _require(n_where, node, str, "a node name string")
                if len(node) > 253 or not _NODE_NAME.match(node):
                    raise TopologyError(f"{n_where}: {node!r} is not a valid Kubernetes node name "
                                        "(lowercase letters, digits, '-' and '.')")
                if node in seen_nodes:
                    raise TopologyError(f"{n_where}: duplicate node {node!r}, already listed at "
                                        f"{seen_nodes[node]}; a node belongs to exactly one clique")
                seen_nodes[node] = f"domains[{d_index}].cliques[{c_index}].nodes[{n_index}]"
                nodes.append(node)
            cliques.append(Clique(clique_id, tuple(nodes)))
        domains.append(Domain(name, uuid, tuple(cliques), profile, gpus))
    if not domains:
        raise TopologyError(f"{source}: domains: empty; list at least one domain")
    return Topology(version, tuple(domains), source)


def _loads_json(text: str, source: str) -> Any:
    try:
        return strict_json_loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"{source}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except DecodeError as exc:
        raise TopologyError(f"{source}: {exc}") from None


def loads_topology(text: str, source: str = "<topology>") -> Topology:
    """Parse YAML or JSON text; raises TopologyError with file/line for syntax errors."""
    if text.lstrip().startswith(("{", "[")):
        return parse_topology(_loads_json(text, source), source)
    try:
        data = strict_yaml_load(text)
    except DecodeError as exc:
        raise TopologyError(f"{source}:{exc.line}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise TopologyError(f"{where}: not valid YAML/JSON: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise TopologyError(f"{source}: not valid YAML/JSON: {exc}") from None
    if data is None:
        raise TopologyError(f"{source}: the document is empty; write version: 1 and a domains list")
    return parse_topology(data, source)


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file (YAML or JSON)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TopologyError(f"{p}: topology file not found; pass an existing file "
                            "(e.g. the demo topology from `cdriver sim topology demo`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"{p}: cannot read topology file: {exc}") from None
    return loads_topology(text, str(p))


def dumps_topology(topology: Topology, as_json: bool = False) -> str:
    """Render a topology document (YAML by default)."""
    data = topology.to_dict()
    if as_json:
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False)


def topologies_dir() -> Path:
    """Where the shipped topology documents are."""
    return Path(__file__).resolve().parent / "topologies"


def demo_topology_path() -> Path:
    """The packaged demo topology (4 nodes, two cliques, cluster UUID ...00ab)."""
    return topologies_dir() / "demo.yaml"


def shipped_topologies() -> dict[str, Path]:
    """The shipped topology documents by name (the file name without .yaml)."""
    return {p.stem: p for p in sorted(topologies_dir().glob("*.yaml"))}


def resolve_topology(name_or_path: str | Path) -> Path:
    """A topology file: an existing path as given, else a shipped document by name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_topologies()
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    raise TopologyError(f"{name_or_path}: no such topology file, and not a shipped topology; shipped: "
                        f"{', '.join(shipped)} (or pass a file, e.g. one written from `cdriver sim topology demo`)")


def rack_topology(profile: str, racks: int, trays: int = 18, gpus_per_node: int = 4) -> Topology:
    """Racks shaped like NVL72 hardware: each rack one NVLink domain (its own cluster UUID) and one
    clique of `trays` compute-tray nodes named `rack<R>-tray<TT>`."""
    family = {"gb200": "b200", "gb300": "b300"}[profile]
    domains = tuple(
        Domain(f"{profile}-nvl72-rack{r}", f"00000000-0000-0000-{family}-{r:012x}",
               (Clique(1, tuple(f"rack{r}-tray{t:02d}" for t in range(1, trays + 1))),), profile, gpus_per_node)
        for r in range(1, racks + 1))
    return Topology(TOPOLOGY_VERSION, domains, f"<{profile} x{racks}>")
