"""D-5: an attempt's writes (begin, settlement) retried on transient storage errors only.

5 attempts, backoff 150 ms x attempt. Transient: a lost or refused connection (too many
clients included), a serialization failure or deadlock (PostgreSQL), a busy database
(SQLite). Anything else is a bug or a refusal and propagates at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connection

from observability.logs import log_event

logger = logging.getLogger("receipt.delivery")
T = TypeVar("T")
ATTEMPTS = 5
BACKOFF_S = 0.150
_PG_TRANSIENT = {
    "40001",
    "40P01",
    "57P01",
    "57P02",
    "57P03",
    "08000",
    "08001",
    "08003",
    "08006",
    "53300",
}  # 53300: too many connections
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "disk i/o error")


def is_transient(error: BaseException) -> bool:
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, DatabaseError):
        return False
    cause = error.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(
        getattr(cause, "diag", None), "sqlstate", None
    )
    if sqlstate in _PG_TRANSIENT:
        return True
    if isinstance(error, OperationalError):
        text = str(error).lower()
        if any(marker in text for marker in _SQLITE_TRANSIENT):
            return True
        if "server closed the connection" in text or ("connection" in text and "lost" in text):
            return True
        if "terminating connection" in text or "consuming input failed" in text:
            return True
        if (
            "too many clients" in text
            or "connection refused" in text
            or "connection failed" in text
        ):
            return True
    return False


def with_storage_retry(
    label: str, operation: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep
) -> T:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return operation()
        except DatabaseError as error:
            if attempt == ATTEMPTS or not is_transient(error):
                raise
            log_event(
                logger,
                "delivery.storage_retry",
                f"{label}: transient storage error on attempt {attempt}: {error}",
                level=logging.WARNING,
                attempt=attempt,
            )
            # A broken connection must be replaced before the next try.
            if connection.connection is not None and not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()
                if connection.errors_occurred or isinstance(error, InterfaceError):
                    connection.close()
            sleep(BACKOFF_S * attempt)
    raise AssertionError("unreachable")
