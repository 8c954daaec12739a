"""Base error type: a message a user can act on (what, which value, how to fix)."""


class CdriverError(Exception):
    """An error with an actionable message; roles report it instead of a traceback."""
