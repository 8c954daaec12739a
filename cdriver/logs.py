"""Logging set-up shared by every role: text or JSON lines on stderr, klog-like verbosity."""

from __future__ import annotations

import json
import logging
import sys
import time

LOG_FORMATS = ("text", "json")
#: Libraries whose debug lines say nothing about the driver (filelock logs every acquire and
#: release of the checkpoint lock); they log warnings and errors only, at any verbosity.
NOISY_LIBRARY_LOGGERS = ("urllib3", "kubernetes.client.rest", "filelock")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, plus any `extra` fields."""

    _skip = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._skip:
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, sort_keys=False)


def verbosity_to_level(verbosity: int) -> int:
    """Map klog-style -v N to a logging level (0..3 info, 4+ debug)."""
    return logging.DEBUG if verbosity >= 4 else logging.INFO


def setup_logging(fmt: str = "text", verbosity: int = 0) -> None:
    """Configure the root logger once for the process."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname).1s %(name)s: %(message)s")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(verbosity_to_level(verbosity))
    for noisy in NOISY_LIBRARY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
