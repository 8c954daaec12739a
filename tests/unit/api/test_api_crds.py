"""The shipped CRDs agree with `cdriver.api` (names, enums, defaults, every field both ways)."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from cdriver.api import constants
from cdriver.api import resources as api_resources  # registers the CRDs in RESOURCES
from cdriver.api.types import ComputeDomain, ComputeDomainClique, ValidationError
from cdriver.checkout import CRD_DIR
from cdriver.kube.resources import RESOURCES


def load(plural: str) -> dict:
    path = CRD_DIR / f"{constants.GROUP}_{plural}.yaml"
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def cd_crd() -> dict:
    return load(constants.PLURAL_COMPUTE_DOMAINS)


@pytest.fixture(scope="module")
def clique_crd() -> dict:
    return load(constants.PLURAL_COMPUTE_DOMAIN_CLIQUES)


def version(crd: dict) -> dict:
    (v,) = crd["spec"]["versions"]
    return v


def schema(crd: dict) -> dict:
    return version(crd)["schema"]["openAPIV3Schema"]


# --- a small structural validator and sample generator ------------------------------------

def validate(obj, sch: dict, path: str = "") -> list[str]:
    """Problems of ``obj`` against a structural schema (types, enums, unknown fields)."""
    problems = []
    typ = sch.get("type")
    checks = {"object": dict, "array": list, "string": str, "boolean": bool}
    if typ == "integer":
        if isinstance(obj, bool) or not isinstance(obj, int):
            return [f"{path}: not an integer"]
    elif typ in checks and not isinstance(obj, checks[typ]):
        return [f"{path}: not {typ}"]
    if "enum" in sch and obj not in sch["enum"]:
        problems.append(f"{path}: {obj!r} not in {sch['enum']}")
    if typ == "object" and "properties" in sch:
        for key, value in obj.items():
            if key not in sch["properties"]:
                problems.append(f"{path}.{key}: not in the CRD schema")
            else:
                problems += validate(value, sch["properties"][key], f"{path}.{key}")
        for key in sch.get("required", []):
            if key not in obj:
                problems.append(f"{path}.{key}: required by the CRD")
    if typ == "array":
        for i, item in enumerate(obj):
            problems += validate(item, sch["items"], f"{path}[{i}]")
    return problems


def sample(sch: dict, name: str = "x"):
    """The fullest object a schema allows: every property, first enum value."""
    typ = sch.get("type")
    if "enum" in sch:
        return sch["enum"][0]
    if typ == "object":
        props = sch.get("properties")
        if props is None:
            return {"name": "obj", "namespace": "ns", "uid": "u-1"} if name == "metadata" else {}
        return {k: sample(v, k) for k, v in props.items()}
    if typ == "array":
        return [sample(sch["items"], name)]
    if typ == "integer":
        return max(0, sch.get("minimum", 0))
    if typ == "boolean":
        return True
    if sch.get("format") == "date-time":
        return "2030-01-01T00:00:00Z"
    return {"apiVersion": constants.API_VERSION}.get(name, f"{name}-value")


def full_cd(cd_crd: dict) -> dict:
    obj = sample(schema(cd_crd))
    obj["kind"] = constants.KIND_COMPUTE_DOMAIN
    return obj


def spec_only(cd_crd: dict) -> dict:
    obj = full_cd(cd_crd)
    del obj["status"]
    return obj


# --- names ---------------------------------------------------------------------------------

def test_names_match_the_api_and_add_short_names(cd_crd, clique_crd):
    for crd, kind, plural, short in (
        (cd_crd, constants.KIND_COMPUTE_DOMAIN, constants.PLURAL_COMPUTE_DOMAINS, "cd"),
        (clique_crd, constants.KIND_COMPUTE_DOMAIN_CLIQUE, constants.PLURAL_COMPUTE_DOMAIN_CLIQUES, "cdclique"),
    ):
        spec = crd["spec"]
        assert crd["metadata"]["name"] == f"{plural}.{constants.GROUP}"
        assert spec["group"] == constants.GROUP and spec["scope"] == "Namespaced"
        assert spec["names"]["kind"] == kind and spec["names"]["listKind"] == f"{kind}List"
        assert spec["names"]["plural"] == plural and spec["names"]["shortNames"] == [short]
        v = version(crd)
        assert (v["name"], v["served"], v["storage"]) == (constants.VERSION, True, True)
        res = RESOURCES[plural]
        assert (res.group, res.version, res.kind) == (constants.GROUP, constants.VERSION, kind)
    assert RESOURCES[constants.PLURAL_COMPUTE_DOMAINS] is api_resources.COMPUTE_DOMAINS
    assert version(cd_crd)["subresources"] == {"status": {}}
    assert "subresources" not in version(clique_crd)


def test_spec_is_immutable_and_enums_match_constants(cd_crd):
    spec = schema(cd_crd)["properties"]["spec"]
    assert spec["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}]
    assert spec["required"] == ["channel"]
    mode = spec["properties"]["channel"]["properties"]["allocationMode"]
    assert set(mode["enum"]) == set(constants.ALLOCATION_MODES)
    assert mode["default"] == constants.ALLOCATION_MODE_SINGLE
    assert spec["properties"]["numNodes"] == {**spec["properties"]["numNodes"], "default": 0,
                                               "minimum": 0}
    status = schema(cd_crd)["properties"]["status"]["properties"]
    assert set(status["status"]["enum"]) == {constants.STATUS_READY, constants.STATUS_NOT_READY}
    assert status["nodes"]["x-kubernetes-list-map-keys"] == ["name"]


def test_clique_daemons_are_a_map_keyed_by_node_name(clique_crd):
    daemons = schema(clique_crd)["properties"]["daemons"]
    assert daemons["x-kubernetes-list-type"] == "map"
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]
    assert set(daemons["items"]["properties"]["status"]["enum"]) == {constants.STATUS_READY,
                                                                      constants.STATUS_NOT_READY}


# --- both directions -----------------------------------------------------------------------

def test_every_crd_field_is_understood_by_the_api_types(cd_crd, clique_crd):
    cd = ComputeDomain.from_dict(full_cd(cd_crd))
    assert cd.channel_template_name == "name-value"
    clique = sample(schema(clique_crd))
    clique["kind"] = constants.KIND_COMPUTE_DOMAIN_CLIQUE
    assert ComputeDomainClique.from_dict(clique).daemons[0].node_name == "nodeName-value"


def test_non_fabric_node_entry_as_the_controller_writes_it_is_readable(cd_crd):
    obj = full_cd(cd_crd)
    obj["status"]["nodes"] = [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "",
                               "index": -1, "status": constants.STATUS_READY}]
    assert validate(obj, schema(cd_crd)) == []
    assert ComputeDomain.from_dict(obj).nodes[0].clique_id == ""


def test_what_the_api_types_write_fits_the_crd(cd_crd, clique_crd):
    cd = ComputeDomain.from_dict(full_cd(cd_crd))
    assert validate(cd.to_dict(), schema(cd_crd)) == []
    clique = sample(schema(clique_crd))
    clique["kind"] = constants.KIND_COMPUTE_DOMAIN_CLIQUE
    decoded = ComputeDomainClique.from_dict(clique)
    assert validate(decoded.to_dict(), schema(clique_crd)) == []
    for d in decoded.daemons:
        assert validate(d.to_dict(), schema(clique_crd)["properties"]["daemons"]["items"]) == []


@pytest.mark.parametrize("path", [("spec",), ("spec", "channel"),
                                  ("spec", "channel", "resourceClaimTemplate"),
                                  ("spec", "channel", "resourceClaimTemplate", "name")])
def test_fields_the_crd_requires_are_required_by_the_types(cd_crd, path):
    obj = copy.deepcopy(spec_only(cd_crd))
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(ValidationError, match=path[-1]):
        ComputeDomain.from_dict(obj)


def test_unknown_enum_values_rejected_by_both(cd_crd):
    obj = spec_only(cd_crd)
    obj["spec"]["channel"]["allocationMode"] = "Some"
    assert validate(obj, schema(cd_crd))
    with pytest.raises(ValidationError, match="allocationMode"):
        ComputeDomain.from_dict(obj)


# --- printer columns -------------------------------------------------------------------------

def _resolves(sch: dict, json_path: str) -> bool:
    node = sch
    for token in re.sub(r"\[[^\]]*\]", "", json_path).strip(".").split("."):
        if node.get("type") == "array":
            node = node["items"]
        props = node.get("properties")
        if token == "creationTimestamp" and props is None:
            return True  # metadata is not spelled out in CRD schemas
        if props is None or token not in props:
            return False
        node = props[token]
    return True


def test_printer_columns_point_at_schema_fields(cd_crd, clique_crd):
    for crd in (cd_crd, clique_crd):
        columns = version(crd)["additionalPrinterColumns"]
        assert columns[-1 if crd is clique_crd else 3]["name"] == "Age"
        for column in columns:
            assert _resolves(schema(crd), column["jsonPath"]), column
    names = [c["name"] for c in version(cd_crd)["additionalPrinterColumns"]]
    assert names[:4] == ["Status", "Ready", "Reason", "Age"]
