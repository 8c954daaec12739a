"""Unknown fields are reported with every path, the message explaining the first."""

from __future__ import annotations

import pytest

from cdriver.api import constants
from cdriver.api.types import UnknownFieldError, ValidationError, decode_opaque_config

UID = "0d5f8a3e-1111-2222-3333-444455556666"


def test_unknown_fields_of_an_opaque_config_name_every_path():
    params = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": UID,
              "zz": 1, "allocationMode": "All"}
    with pytest.raises(UnknownFieldError) as err:
        decode_opaque_config(params)
    assert isinstance(err.value, ValidationError)
    assert err.value.paths == ("allocationMode", "zz")
    assert str(err.value).startswith("ComputeDomainDaemonConfig: field allocationMode: unknown field 'allocationMode'")
