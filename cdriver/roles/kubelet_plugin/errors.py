"""Per-claim errors of the kubelet plugin (permanent or worth retrying) and upstream's phrases for them."""

from __future__ import annotations

import json
from collections.abc import Iterable

from cdriver.errors import CdriverError


class ClaimError(CdriverError):
    """Preparing or unpreparing one claim failed; the message goes to kubelet as the claim's error.

    ``permanent``: retrying the same claim cannot succeed (bad config, wrong namespace,
    unsupported claim); otherwise kubelet's retry may succeed once the cause is gone.
    """

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent

    @property
    def kind(self) -> str:
        return "permanent" if self.permanent else "retryable"


def permanent(message: str) -> ClaimError:
    return ClaimError(message, permanent=True)


def retryable(message: str) -> ClaimError:
    return ClaimError(message, permanent=False)


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
