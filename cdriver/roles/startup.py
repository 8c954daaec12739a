"""Process plumbing the role commands share: the top-level options, the IMEX mode, signals."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
from collections.abc import Callable, Iterable

import click

from cdriver.api.imex_mode import ImexConfig, resolve_imex_config
from cdriver.errors import CdriverError
from cdriver.featuregates import FeatureGates

log = logging.getLogger(__name__)

#: Signals that end a role gracefully: SIGTERM from kubelet, SIGINT from a terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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
