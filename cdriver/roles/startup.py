"""Process plumbing the role commands share: the top-level options, the IMEX mode, the
client-side rate limit of API requests, signals."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from cdriver.api.imex_mode import ImexConfig, resolve_imex_config
from cdriver.errors import CdriverError
from cdriver.featuregates import FeatureGates
from cdriver.kube import ratelimit

log = logging.getLogger(__name__)

#: Signals that end a role gracefully: SIGTERM from kubelet, SIGINT from a terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Command = TypeVar("_Command", bound=Callable[..., Any])


def root_options(ctx: click.Context) -> dict:
    """Options of the top-level `cdriver` group (``feature_gates``, ``verbosity``,
    ``log_format``); empty when a role command is invoked on its own."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, dict) else {}


def resolve_imex(mode: str, isolation: str, feature_gates: str) -> ImexConfig:
    """`resolve_imex_config`, logging each explicit gate the mode turns off or cdriver ignores."""
    imex = resolve_imex_config(mode, isolation, feature_gates)
    log_gates_without_effect(imex.gates)
    for name in imex.overridden:
        log.warning("feature gate %s is ignored in %s mode (no driver-run daemons)", name, imex.mode)
    return imex


def log_gates_without_effect(gates: FeatureGates) -> None:
    """One info line per explicitly set gate that cdriver accepts but does not act on."""
    for name in gates.without_effect():
        log.info("feature gate %s is accepted for compatibility with the upstream driver "
                 "but has no effect in cdriver", name)


def kube_api_options(qps: float, burst: int) -> Callable[[_Command], _Command]:
    """Upstream's ``--kube-api-qps``/``KUBE_API_QPS`` and ``--kube-api-burst``/``KUBE_API_BURST``
    with this role's defaults; the command receives ``kube_api_qps`` and ``kube_api_burst``."""
    def decorate(command: _Command) -> _Command:
        command = click.option(
            ratelimit.BURST_FLAG, "kube_api_burst", type=int, default=burst, envvar=ratelimit.ENV_BURST,
            show_default=True, show_envvar=True,
            help="Requests to the API server that may go at once before --kube-api-qps applies "
                 "(0: client-go's 10).")(command)
        return click.option(
            ratelimit.QPS_FLAG, "kube_api_qps", type=float, default=qps, envvar=ratelimit.ENV_QPS,
            show_default=True, show_envvar=True,
            help="Requests a second to the API server, client-side (0: client-go's 5; "
                 "negative: no limit).")(command)
    return decorate


def rate_limiter(qps: float, burst: int) -> ratelimit.TokenBucket | None:
    """The client-side rate limit these settings ask for (None: off), logged once; raises
    `ratelimit.RateLimitSettingError` (a `CdriverError`) naming the flag and the fix."""
    limiter = ratelimit.limiter_for(qps, burst)
    if limiter is None:
        log.info("client-side rate limit of API requests: off (%s %g)", ratelimit.QPS_FLAG, qps)
    else:
        log.info("client-side rate limit of API requests: %g a second, burst %d",
                 limiter.qps, limiter.burst)
    return limiter


def check_http_endpoint(endpoint: str) -> None:
    """Reject a malformed ``--http-endpoint`` before anything starts (empty means off)."""
    from cdriver.httpserve import parse_endpoint  # keeps the daemon's probe free of prometheus

    if endpoint:
        try:
            parse_endpoint(endpoint)
        except ValueError as exc:
            raise CdriverError(str(exc)) from None


def install_signal_handlers(on_stop: Callable[[int], None],
                            stop_signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
    """Call ``on_stop(signum)`` on each stop signal; SIGUSR2 dumps every thread's stack to
    stderr (the container log) for debugging a stuck process. Main thread only."""
    for sig in stop_signals:
        signal.signal(sig, lambda signum, _frame: on_stop(signum))
    faulthandler.register(signal.SIGUSR2, file=sys.stderr, all_threads=True)
