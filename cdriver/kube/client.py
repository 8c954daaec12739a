"""Build an authenticated Kubernetes API client from a kubeconfig or the in-cluster account."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from cdriver.errors import CdriverError

log = logging.getLogger(__name__)

#: Connections kept per host; each long-running watch holds one, workers share the rest.
DEFAULT_POOL_MAXSIZE = 32


class KubeConfigError(CdriverError):
    """The API server connection settings could not be loaded."""


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and bool(
        os.environ.get("KUBERNETES_SERVICE_PORT")
    )


def load_api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
) -> k8s_client.ApiClient:
    """Return an ApiClient for the cluster.

    Order: the given kubeconfig path, else ``$KUBECONFIG``, else the in-cluster service
    account (when running in a pod), else ``~/.kube/config``. Raises `KubeConfigError`
    naming the source that failed and how to fix it.
    """
    configuration = type.__call__(k8s_client.Configuration)
    source = kubeconfig or os.environ.get("KUBECONFIG") or ""
    try:
        if source:
            for part in source.split(os.pathsep):
                if part and not Path(part).is_file():
                    raise KubeConfigError(
                        f"kubeconfig {part!r} does not exist; pass --kubeconfig with an "
                        "existing file or unset KUBECONFIG to use the in-cluster account"
                    )
            k8s_config.load_kube_config(
                config_file=source, context=context,
                client_configuration=configuration, persist_config=False,
            )
        elif _in_cluster():
            source = "in-cluster service account"
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            default = Path.home() / ".kube" / "config"
            if not default.is_file():
                raise KubeConfigError(
                    "no Kubernetes credentials: pass --kubeconfig PATH, set KUBECONFIG, "
                    "or run inside a pod with a service account"
                )
            source = str(default)
            k8s_config.load_kube_config(
                config_file=source, context=context,
                client_configuration=configuration, persist_config=False,
            )
    except KubeConfigError:
        raise
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise KubeConfigError(
            f"cannot load Kubernetes credentials from {source}: {exc}; check the file's "
            "clusters/users/contexts entries (kubectl --kubeconfig FILE config view)"
        ) from exc
    except Exception as exc:  # yaml errors and the like, never a traceback to the user
        raise KubeConfigError(
            f"cannot parse Kubernetes credentials from {source}: {exc}"
        ) from exc
    configuration.connection_pool_maxsize = max(pool_maxsize, 1)
    log.debug("API server %s (credentials from %s)", configuration.host, source)
    return k8s_client.ApiClient(configuration)


def new_raw_client(kubeconfig: str | None = None, context: str | None = None):
    """Shorthand: `RawClient` over `load_api_client(kubeconfig, context)`."""
    from cdriver.kube.raw import RawClient

    return RawClient(load_api_client(kubeconfig, context))
