"""Structured JSON logs (X-1): one object per line, secrets redacted, strings clipped."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

SENSITIVE = re.compile(
    r"authorization|cookie|password|secret|token|api[ _-]?key|access[ _-]?key|session", re.I
)
MAX_STRING = 2000
MAX_TRACEBACK = 20_000  # a clipped traceback hides the line that failed
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def redact(value: Any, *, depth: int = 0) -> Any:
    """Redact values under sensitive keys and clip long strings, recursively."""
    if depth > 8:
        return "…"
    if isinstance(value, dict):
        return {
            k: "[redacted]" if SENSITIVE.search(str(k)) else redact(v, depth=depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, depth=depth + 1) for v in value]
    if isinstance(value, str) and len(value) > MAX_STRING:
        return value[:MAX_STRING] + "…"
    return value


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str = "receipt") -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        event = extra.pop("event", None) or record.name
        line: dict[str, Any] = {
            "ts": int(record.created * 1000),
            "level": record.levelname.lower(),
            "service": extra.pop("service", self.service),
            "event": event,
            "message": record.getMessage(),
        }
        line.update(extra)
        line = redact(line)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)[-MAX_TRACEBACK:]
        return json.dumps(line, default=str, ensure_ascii=False)


def log_event(
    logger: logging.Logger, event: str, message: str, *, level: int = logging.INFO, **context: Any
) -> None:
    """Log one structured event; `context` keys become top-level JSON fields, except
    `exc_info`, which is the logging call's own (with the traceback) and no field: as a
    field `logging` refuses it (KeyError), which turned each error log into an error."""
    exc_info = context.pop("exc_info", None)
    logger.log(level, message, exc_info=exc_info, extra={"event": event, **context})
