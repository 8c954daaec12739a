"""The driver's custom resources, registered with `cdriver.kube.resources.RESOURCES` by plural.

Use `COMPUTE_DOMAINS` and `COMPUTE_DOMAIN_CLIQUES`; once this module is imported,
`RESOURCES["computedomains"]` finds them too (e.g. for looking resources up by kind).
"""

from __future__ import annotations

from cdriver.api.constants import (
    GROUP,
    KIND_COMPUTE_DOMAIN,
    KIND_COMPUTE_DOMAIN_CLIQUE,
    PLURAL_COMPUTE_DOMAIN_CLIQUES,
    PLURAL_COMPUTE_DOMAINS,
    VERSION,
)
from cdriver.kube.resources import Resource, register_resource

COMPUTE_DOMAINS = register_resource(Resource(GROUP, VERSION, PLURAL_COMPUTE_DOMAINS, True, KIND_COMPUTE_DOMAIN))
COMPUTE_DOMAIN_CLIQUES = register_resource(
    Resource(GROUP, VERSION, PLURAL_COMPUTE_DOMAIN_CLIQUES, True, KIND_COMPUTE_DOMAIN_CLIQUE))
