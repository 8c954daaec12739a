"""ComputeDomain API: the upstream contract's names, the CRD types, opaque configs, IMEX modes.

Importing the package registers the custom resources with `cdriver.kube` (see resources.py).
"""

from cdriver.api import resources as resources
