"""Per-claim errors of the kubelet plugin: permanent ones versus ones worth retrying."""

from __future__ import annotations

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
