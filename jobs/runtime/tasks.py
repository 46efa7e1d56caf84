"""django-q2 entry points: one line each. They never raise, so django-q2 stores no
Failure rows and never retries on its own (the receipts decide retries)."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from observability.logs import log_event

logger = logging.getLogger("receipt.delivery")
HEALTH_CHECK_EVERY_S = 1.0
_last_health_check = 0.0


def _health_check_at_most_every_second() -> None:
    """django-q2 closes obsolete connections before every task, and that makes Django
    ping the server (`SELECT 1`) before the task's first query: a round trip per job. A
    connection checked within the last second is taken as healthy; one that died since
    fails its first statement with a transient error, which the storage retry handles."""
    global _last_health_check
    now = time.monotonic()
    connection = connections[DEFAULT_DB_ALIAS]  # one lookup (a thread-local) for three reads
    if (
        connection.connection is not None
        and not connection.errors_occurred
        and now - _last_health_check < HEALTH_CHECK_EVERY_S
    ):
        connection.health_check_done = True
    else:
        _last_health_check = now


def _guarded(label: str, promise_id: Any, call: Any, *args: Any, **kwargs: Any) -> Any:
    _health_check_at_most_every_second()
    try:
        return call(*args, **kwargs)
    except Exception as error:  # the promise stays open; recovery redrives the job
        log_event(
            logger,
            "delivery.task_error",
            f"{label} {promise_id} failed: {error}",
            level=logging.ERROR,
            promiseId=str(promise_id),
            exc_info=True,
        )
        return {"status": "error", "promiseId": promise_id, "error": str(error)}


def drive(promise_id: str) -> dict[str, Any]:
    from jobs.runtime import driver

    return _guarded("drive", promise_id, driver.drive, promise_id)


def drive_many(promise_ids: list[str]) -> list[dict[str, Any]]:
    from jobs.runtime import driver

    return _guarded("drive", promise_ids, driver.drive_many, promise_ids)


def execute(promise_id: str, **known: Any) -> dict[str, Any]:
    from jobs.runtime import worker

    return _guarded("execute", promise_id, worker.execute, promise_id, **known)
