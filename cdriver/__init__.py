"""cdriver: the ComputeDomain DRA driver for Kubernetes, with a simulation kit."""

__version__ = "0.1.0"

#: Kubernetes API version this release targets (resource.k8s.io/v1, client 37.x).
KUBERNETES_VERSION = "1.37"
