"""Logging set-up shared by every role: text or JSON lines on stderr, and klog-like verbosity
graded as upstream's (`GRADES`: what each level adds)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

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


#: Logger of the API requests the REST client sends (method, path, status, latency).
API_REQUESTS_LOGGER = "cdriver.kube.requests"
#: Logger of each object a watch delivers.
WATCH_EVENTS_LOGGER = "cdriver.kube.informer"
#: Logger of the requests the metrics and health endpoints serve.
HTTP_ACCESS_LOGGER = "cdriver.httpserve"


@dataclass(frozen=True)
class Grade:
    """What one `logVerbosity` adds to the levels below it."""

    verbosity: int
    adds: str
    levels: Mapping[str, int]  #: logger name ("" the root) -> the level it logs at from here on


#: klog-style verbosity, graded as upstream's: each grade adds to the ones below it.
GRADES: tuple[Grade, ...] = (
    Grade(0, "each role's start-up configuration (settings, feature gates, versions), the changes "
             "it makes, warnings and errors",
          {"": logging.INFO, WATCH_EVENTS_LOGGER: logging.INFO, API_REQUESTS_LOGGER: logging.INFO,
           HTTP_ACCESS_LOGGER: logging.INFO}),
    Grade(2, "per object: each object a watch delivers (kind, name, resourceVersion)",
          {WATCH_EVENTS_LOGGER: logging.DEBUG}),
    Grade(4, "per request and per object: each gRPC call of the kubelet plugin, each reconcile, "
             "each Event, each daemon state change, and the other debug lines of the driver",
          {"": logging.DEBUG}),
    Grade(6, "each API request: method, path, status and latency", {API_REQUESTS_LOGGER: logging.DEBUG}),
    Grade(7, "each request to the metrics and health endpoints", {HTTP_ACCESS_LOGGER: logging.DEBUG}),
)


def logger_levels(verbosity: int) -> dict[str, int]:
    """The level of each graded logger at `verbosity` (the grades up to it, applied in order)."""
    levels: dict[str, int] = {}
    for grade in GRADES:
        if grade.verbosity <= verbosity:
            levels.update(grade.levels)
    return levels


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
    for name, level in logger_levels(verbosity).items():
        logging.getLogger(name or None).setLevel(level)
    for noisy in NOISY_LIBRARY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
