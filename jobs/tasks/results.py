"""Task results read from the receipts: a `TaskResult` is the job's fold plus its attempts
(`jobs.core.attempts`), never a table of its own, so it says exactly what the receipts say.

- status: queued -> READY (new, or waiting for its next attempt), leased/running ->
  RUNNING, completed -> SUCCESSFUL, failed/canceled -> FAILED (the framework has no
  canceled status; the error names `jobs.tasks.errors.TaskCanceled`).
- times: enqueued_at is the job's first receipt, started_at the first attempt's lease,
  last_attempted_at the latest attempt's lease, finished_at the settlement.
- worker_ids: one per attempt, in order (so `attempts` and `TaskContext.attempt` count
  Receipt's attempts); errors: one per attempt that did not complete, and one for a
  cancel that came while the job was queued.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from jobs.core.attempts import Attempt, History, attempt_history
from jobs.core.state import JobState
from jobs.core.vocabulary import JOB_CANCELED, JOB_COMPLETED, is_job_id, job_stream
from jobs.tasks import payload
from jobs.tasks.errors import TaskAttemptFailed, TaskCanceled
from jobs.tasks.framework import Task, TaskError, TaskResult, TaskResultStatus
from receipts import store

STATUS: dict[str, Any] = {  # TaskResultStatus members (Any: no Django type stubs here)
    "queued": TaskResultStatus.READY,
    "leased": TaskResultStatus.RUNNING,
    "running": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "canceled": TaskResultStatus.FAILED,
}
ATTEMPT_FAILED = f"{TaskAttemptFailed.__module__}.{TaskAttemptFailed.__qualname__}"
CANCELED = f"{TaskCanceled.__module__}.{TaskCanceled.__qualname__}"


def moment(ms: int | None) -> datetime | None:
    """A receipt's ms timestamp as the datetime Django uses (aware when USE_TZ)."""
    if ms is None:
        return None
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at if settings.USE_TZ else timezone.make_naive(at)


def history(job_id: str) -> History | None:
    """The history of a task's job, None when there is no such job or it is not a task's.
    One read of the job's stream (small: a task's job has a few receipts per attempt)."""
    if not is_job_id(job_id):
        return None
    found = attempt_history(store.read(job_stream(job_id)))
    job = found.job
    if job is None or job.agent_id != payload.AGENT_ID or job.kind != payload.KIND:
        return None
    return found


def build(task: Task, found: History) -> TaskResult:
    job = found.job
    assert job is not None
    attempts = found.attempts
    args, kwargs = payload.arguments(job.payload)
    result: TaskResult = TaskResult(
        task=task,
        id=job.job_id,
        status=STATUS[job.status],
        enqueued_at=moment(job.created_at),
        started_at=moment(attempts[0].started_at) if attempts else None,
        last_attempted_at=moment(attempts[-1].started_at) if attempts else None,
        finished_at=moment(found.settled_at) if job.is_terminal else None,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=errors(job, attempts),
        worker_ids=[attempt.worker_id for attempt in attempts],
    )
    if job.status == "completed":
        object.__setattr__(result, "_return_value", job.result)
    return result


def errors(job: JobState, attempts: tuple[Attempt, ...]) -> list[TaskError]:
    found = [_error(a) for a in attempts if a.ended_by not in (None, JOB_COMPLETED)]
    canceled_queued = job.status == "canceled" and (
        not attempts or attempts[-1].ended_by != JOB_CANCELED
    )
    if canceled_queued:
        found.append(TaskError(exception_class_path=CANCELED, traceback=job.cancel_reason or ""))
    return found


def _error(attempt: Attempt) -> TaskError:
    detail: Any = attempt.detail
    if isinstance(detail, dict):
        path, trace = detail.get("exceptionClassPath"), detail.get("traceback")
        if isinstance(path, str) and isinstance(trace, str):
            return TaskError(exception_class_path=path, traceback=trace)
    if attempt.ended_by == JOB_CANCELED:
        return TaskError(exception_class_path=CANCELED, traceback=attempt.error or "")
    return TaskError(exception_class_path=ATTEMPT_FAILED, traceback=attempt.error or "")


def ended(result: TaskResult, *, error: TaskError | None, value: Any = None) -> TaskResult:
    """The result of a running attempt as it ends the task: SUCCESSFUL with `value`, or
    FAILED with `error` added."""
    status: Any = TaskResultStatus.FAILED if error is not None else TaskResultStatus.SUCCESSFUL
    done = dataclasses.replace(
        result,
        status=status,
        finished_at=timezone.now(),
        errors=[*result.errors, *([error] if error is not None else [])],
    )
    if error is None:
        object.__setattr__(done, "_return_value", value)
    return done
