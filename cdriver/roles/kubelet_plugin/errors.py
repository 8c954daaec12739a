"""Per-claim errors of the kubelet plugin (permanent or worth retrying) and upstream's phrases for them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError

#: Why a claim operation failed, as the metrics say it (a bounded set; `REASON_NONE` for success).
REASON_NONE = "none"
REASON_WAITING_FOR_DAEMON = "waiting_for_daemon"
REASON_HOST_IMEX_NOT_READY = "host_imex_not_ready"
REASON_DOMAIN_DELETING = "domain_deleting"
REASON_DOMAIN_NOT_FOUND = "domain_not_found"
REASON_INVALID_CONFIG = "invalid_config"
REASON_CHANNEL_IN_USE = "channel_in_use"
REASON_WRONG_NAMESPACE = "wrong_namespace"
REASON_API_ERROR = "api_error"
REASON_CANCELLED = "cancelled"
REASON_INTERNAL = "internal"
REASON_OTHER = "other"
REASONS = (REASON_NONE, REASON_WAITING_FOR_DAEMON, REASON_HOST_IMEX_NOT_READY, REASON_DOMAIN_DELETING,
           REASON_DOMAIN_NOT_FOUND, REASON_INVALID_CONFIG, REASON_CHANNEL_IN_USE, REASON_WRONG_NAMESPACE,
           REASON_API_ERROR, REASON_CANCELLED, REASON_INTERNAL, REASON_OTHER)
#: The kind of a claim not known (yet) when its operation ended.
KIND_UNKNOWN = "unknown"


class ClaimError(CdriverError):
    """Preparing or unpreparing one claim failed; the message goes to kubelet as the claim's error.

    ``permanent``: retrying the same claim cannot succeed (bad config, wrong namespace,
    unsupported claim); otherwise kubelet's retry may succeed once the cause is gone.
    ``reason``: one of `REASONS`, set where the error is raised (metrics). ``claim_kind``: the
    claim's kind (channel, daemon) once known, `KIND_UNKNOWN` before.
    """

    def __init__(self, message: str, permanent: bool = False, reason: str = REASON_OTHER) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.reason = reason if reason in REASONS else REASON_OTHER
        self.claim_kind = KIND_UNKNOWN

    @property
    def kind(self) -> str:
        return "permanent" if self.permanent else "retryable"


def permanent(message: str, reason: str = REASON_OTHER) -> ClaimError:
    return ClaimError(message, permanent=True, reason=reason)


def retryable(message: str, reason: str = REASON_OTHER) -> ClaimError:
    return ClaimError(message, permanent=False, reason=reason)


@dataclass
class ClaimSeen:
    """What one Prepare or Unprepare learned about its claim so far: the kind its result is
    counted under."""

    kind: str = KIND_UNKNOWN


def as_claim_error(ref: object, exc: CdriverError, seen: ClaimSeen) -> ClaimError:
    """The error kubelet gets for ``exc``: a ClaimError as raised, any other (the API server's,
    the checkpoint's) retryable; either carries the claim's kind as far as ``seen`` knows it."""
    if isinstance(exc, ClaimError):
        error = exc
    else:
        error = retryable(f"claim {ref}: {exc}",
                          reason=REASON_API_ERROR if isinstance(exc, ApiError) else REASON_INTERNAL)
    if error.claim_kind == KIND_UNKNOWN:
        error.claim_kind = seen.kind or KIND_UNKNOWN
    return error


# Upstream's stable phrases, carried verbatim so alert rules and greps written for upstream's
# messages match cdriver's too; cdriver's own explanation and fix follow them.
PREPARE_FAILED = "error preparing devices for claim"
PERMANENT_PREPARE_FAILED = "Permanent error preparing devices for claim"
STRICT_DECODING = "strict decoding error"


def prepare_failed(claim: str, message: str) -> str:
    """The per-claim error kubelet gets for a failed Prepare (and shows in the pod's Events)."""
    return f"{PREPARE_FAILED} '{claim}': {message}"


def prepare_failed_log(claim: str, exc: ClaimError) -> str:
    """The plugin's log line for a failed Prepare: upstream's phrase, then the kind and the message."""
    if exc.permanent:
        return f"{PERMANENT_PREPARE_FAILED} {claim} (permanent: kubelet's retries fail until the cause is fixed): {exc}"
    return f"{PREPARE_FAILED} '{claim}' (retryable: kubelet retries): {exc}"


def strict_decoding(unknown_paths: Iterable[str]) -> str:
    """Upstream's strict decoding error for unknown fields: ``strict decoding error: unknown field "x"``."""
    return f"{STRICT_DECODING}: " + ", ".join(f"unknown field {json.dumps(path)}" for path in unknown_paths)
