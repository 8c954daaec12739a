"""CDI (Container Device Interface): spec model, transient spec files, and ID resolution."""

from cdriver.cdi.model import (
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    Mount,
    Spec,
    qualified_name,
)
from cdriver.cdi.reader import CDIRegistry
from cdriver.cdi.writer import claim_spec_name, list_specs, remove_spec, write_spec

__all__ = [
    "CDIError",
    "CDIRegistry",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Mount",
    "Spec",
    "claim_spec_name",
    "list_specs",
    "qualified_name",
    "remove_spec",
    "write_spec",
]
