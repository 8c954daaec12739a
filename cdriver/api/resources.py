"""The driver's custom resources, registered with `cdriver.kube.raw.RESOURCES` by plural.

Importing any part of `cdriver.api` registers them, so `RESOURCES["computedomains"]` works
wherever the API types are known.
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
from cdriver.kube.raw import Resource, register_resource

COMPUTE_DOMAINS = register_resource(Resource(GROUP, VERSION, PLURAL_COMPUTE_DOMAINS, True, KIND_COMPUTE_DOMAIN))
COMPUTE_DOMAIN_CLIQUES = register_resource(
    Resource(GROUP, VERSION, PLURAL_COMPUTE_DOMAIN_CLIQUES, True, KIND_COMPUTE_DOMAIN_CLIQUE))
