"""django-q2 entry points: one line each. They never raise, so django-q2 stores no
Failure rows and never retries on its own (the receipts decide retries)."""

from __future__ import annotations

import logging
from typing import Any

from observability.logs import log_event

logger = logging.getLogger("receipt.delivery")


def _guarded(label: str, promise_id: Any, call: Any, *args: Any, **kwargs: Any) -> Any:
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

    return _guarded("drive", promise_id, driver.drive, promise_id)  # type: ignore[no-any-return]


def drive_many(promise_ids: list[str]) -> list[dict[str, Any]]:
    from jobs.runtime import driver

    return _guarded("drive", promise_ids, driver.drive_many, promise_ids)  # type: ignore[no-any-return]


def execute(promise_id: str, **known: Any) -> dict[str, Any]:
    from jobs.runtime import worker

    return _guarded("execute", promise_id, worker.execute, promise_id, **known)  # type: ignore[no-any-return]
