"""Build an authenticated connection to the API server from a kubeconfig or the pod's account.

The roles' path uses only `cdriver.kube.config` + `cdriver.kube.connection` (urllib3); the
`kubernetes` package is imported only for kubeconfigs that need its credential plugins
(``exec``, ``auth-provider``) or ``proxy-url``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from cdriver.kube.config import (
    KubeConfigError,
    UnsupportedKubeconfig,
    resolve_settings,
)
from cdriver.kube.connection import (
    DEFAULT_POOL_MAXSIZE,
    ApiClientConnection,
    ApiConnection,
    Connection,
)

if TYPE_CHECKING:
    from cdriver.kube.raw import RawClient

__all__ = ["DEFAULT_POOL_MAXSIZE", "KubeConfigError", "load_api_client", "new_raw_client"]

log = logging.getLogger(__name__)


def load_api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
) -> Connection:
    """Return a connection to the cluster for `cdriver.kube.raw.RawClient`.

    Order: the given kubeconfig path, else ``$KUBECONFIG``, else the in-cluster service
    account (when running in a pod), else ``~/.kube/config``. Raises `KubeConfigError`
    naming the file and field that failed and how to fix it.
    """
    try:
        settings = resolve_settings(kubeconfig, context)
    except UnsupportedKubeconfig as exc:
        log.info("%s; loading it with the kubernetes package", exc)
        return ApiClientConnection(_kubernetes_api_client(exc.paths, exc.context, pool_maxsize))
    connection = ApiConnection(settings, pool_maxsize=pool_maxsize)
    log.debug("API server %s (credentials from %s)", connection.host, settings.source)
    return connection


def _kubernetes_api_client(paths: list[str], context: str | None, pool_maxsize: int) -> Any:
    """A `kubernetes.client.ApiClient` for kubeconfigs only that package can load."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    configuration = type.__call__(k8s_client.Configuration)
    source = os.pathsep.join(paths)
    try:
        k8s_config.load_kube_config(
            config_file=source, context=context,
            client_configuration=configuration, persist_config=False,
        )
    except Exception as exc:  # any loader failure is the kubeconfig's: never a traceback
        raise KubeConfigError(
            f"cannot load Kubernetes credentials from {source}: {exc}; check the file's "
            "clusters/users/contexts entries (kubectl --kubeconfig FILE config view)"
        ) from exc
    configuration.connection_pool_maxsize = max(pool_maxsize, 1)
    return k8s_client.ApiClient(configuration)


def new_raw_client(kubeconfig: str | None = None, context: str | None = None) -> RawClient:
    """Shorthand: `RawClient` over `load_api_client(kubeconfig, context)`."""
    from cdriver.kube.raw import RawClient

    return RawClient(load_api_client(kubeconfig, context))
