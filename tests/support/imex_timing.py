"""IMEX stand-in timings for tests: heartbeats and reconnects short enough that a domain of
stand-ins converges in well under a second and notices a dead peer within `peer_timeout`."""

from __future__ import annotations

from cdriver.sim.imex.protocol import (
    ENV_SIM_IMEX_HEARTBEAT,
    ENV_SIM_IMEX_PEER_TIMEOUT,
    ENV_SIM_IMEX_RETRY_INITIAL,
    ENV_SIM_IMEX_RETRY_MAX,
)


def fast_imex_env(peer_timeout: float = 1.0) -> dict[str, str]:
    """The CDRIVER_SIM_IMEX_* variables of the fast timings."""
    return {ENV_SIM_IMEX_HEARTBEAT: "0.2", ENV_SIM_IMEX_PEER_TIMEOUT: f"{peer_timeout:g}",
            ENV_SIM_IMEX_RETRY_INITIAL: "0.1", ENV_SIM_IMEX_RETRY_MAX: "0.5"}
