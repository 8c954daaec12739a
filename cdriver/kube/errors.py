"""`ApiError`: a failed API request, with the HTTP status and what kind of failure it is."""

from __future__ import annotations

from typing import Any

from cdriver.errors import CdriverError


class ApiError(CdriverError):
    """An API request failed. ``status`` is the HTTP code (0: no response was received)."""

    def __init__(self, status: int, reason: str, message: str, body: Any = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        super().__init__(f"API error {status} {reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        """An optimistic-concurrency conflict (stale resourceVersion / failed precondition)."""
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        """The requested resourceVersion is too old (relist needed)."""
        return self.status == 410 or self.reason in ("Expired", "Gone")

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def unavailable(self) -> bool:
        """No usable response: connection refused/reset, timeout, or 5xx / 429."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @classmethod
    def from_status(cls, status_obj: dict, http_status: int = 0) -> ApiError:
        """Build from a metav1.Status dict (a response body or a watch ERROR event)."""
        code = status_obj.get("code") or http_status
        return cls(
            int(code), str(status_obj.get("reason") or ""),
            str(status_obj.get("message") or ""), status_obj,
        )
