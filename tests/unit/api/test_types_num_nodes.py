"""spec.numNodes: omitted, 0 and positive are all accepted, by the decoder and by the CRD
(as upstream's CRD since v0.5.0); a spec is written back as it came."""

from __future__ import annotations

import pytest
import yaml

from cdriver.api import constants
from cdriver.api.types import MAX_NUM_NODES, ComputeDomain
from cdriver.checkout import CRD_DIR

UID = "0d5f8a3e-1111-2222-3333-444455556666"
OMITTED = object()


def cd_with(num_nodes: object) -> dict:
    spec: dict = {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}}
    if num_nodes is not OMITTED:
        spec["numNodes"] = num_nodes
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": "cd", "namespace": "team", "uid": UID}, "spec": spec}


def num_nodes_schema() -> tuple[dict, dict]:
    crd = yaml.safe_load((CRD_DIR / f"{constants.GROUP}_{constants.PLURAL_COMPUTE_DOMAINS}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec, spec["properties"]["numNodes"]


@pytest.mark.parametrize("given,decoded", [
    (OMITTED, 0), (None, 0), (0, 0), (1, 1), (4, 4), (MAX_NUM_NODES, MAX_NUM_NODES)])
def test_the_decoder_accepts_num_nodes_omitted_zero_and_positive(given, decoded):
    obj = cd_with(given)
    cd = ComputeDomain.from_dict(obj)
    assert cd.num_nodes == decoded
    assert cd.to_dict()["spec"] == obj["spec"]  # an old object's spec is written back untouched


def test_the_crd_makes_num_nodes_optional_defaulting_to_zero():
    spec, num_nodes = num_nodes_schema()
    assert "numNodes" not in spec.get("required", [])
    assert num_nodes["type"] == "integer" and num_nodes["default"] == 0


@pytest.mark.parametrize("value", [0, 1, 4, MAX_NUM_NODES])
def test_the_crd_bounds_admit_zero_and_positive(value):
    _, num_nodes = num_nodes_schema()
    assert num_nodes["minimum"] == 0 and "exclusiveMinimum" not in num_nodes
    assert num_nodes["minimum"] <= value <= num_nodes.get("maximum", value)
