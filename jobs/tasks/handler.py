"""The handler of agent `django-task` (`jobs.handlers`): it runs the task its job's payload
names, on the worker's real attempt (begin, heartbeat, settle, retries as for any job).

- Only a framework `Task` found at the payload's module path runs (`payload.task_of`);
  anything else fails the job without a retry.
- `takes_context`: the task gets a `TaskContext` whose `attempt` is Receipt's attempt
  number; async task functions run to completion on this thread (`Task.call`).
- The return value is the job's result (JSON); an exception fails the attempt, retried
  while attempts remain, and leaves its class path and traceback in the `job.failed`
  receipt (`result`), which the task result's errors read. A transient error of the
  platform's own database is re-raised: the worker runs the handler again then, as for
  any handler, and the attempt is not spent on it.
- Signals: `task_started` before the task runs; `task_finished` once the task is done:
  after its completion is recorded, or when it fails with no attempt left.
"""

from __future__ import annotations

import traceback
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from jobs import handlers, limits
from jobs.core import bodies, contracts, retry_policy
from jobs.core.attempts import Attempt, History
from jobs.core.state import JobState
from jobs.errors import InvalidRequest
from jobs.handler_contract import HandlerContext, JobResult
from jobs.runtime.storage_retry import is_transient
from jobs.tasks import payload, results
from jobs.tasks.framework import (
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    task_finished,
    task_started,
)
from jobs.tasks.options import ReceiptTask
from jobs.validation import check_payload_size

# A traceback is kept whole up to this many characters, else its end (where the error is).
TRACEBACK_CHARS = 32_000


def run_task(job: JobState, ctx: HandlerContext) -> JobResult:
    try:
        task = payload.task_of(job.payload)
    except (InvalidTask, InvalidTaskBackend) as error:
        return _failure(error, no_retry=True)
    sender = type(task.get_backend())
    running = _running(task, job, ctx)
    task_started.send(sender, task_result=running)
    args, kwargs = payload.arguments(job.payload)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=running), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the task's failure, whatever it raised
        if is_transient(error):
            raise
        return _ended_failed(job, running, sender, error)
    try:
        value = payload.plain_json(value, what=f"the return value of task {task.module_path}")
        check_payload_size(value)
    except (TypeError, InvalidRequest) as error:  # running it again cannot store it either
        return _ended_failed(job, running, sender, error, no_retry=True)
    finished = results.ended(running, error=None, value=value)
    return JobResult.success(
        value, after_complete=lambda: task_finished.send(sender, task_result=finished)
    )


def _running(task: Task, job: JobState, ctx: HandlerContext) -> TaskResult:
    """The task's result as its attempt starts. A first attempt needs no read: its lease is
    the job's last receipt; a later one reads the earlier attempts from the receipts."""
    found = results.history(job.job_id) if ctx.attempt > 1 else None
    if found is None:
        first = Attempt(attempt=ctx.attempt, worker_id=ctx.worker_id, started_at=job.updated_at)
        found = History(job, (first,), None)
    return results.build(task, found)


def _ended_failed(
    job: JobState,
    running: TaskResult,
    sender: type,
    error: BaseException,
    *,
    no_retry: bool = False,
) -> JobResult:
    policy = retry_policy.policy_for(job.kind, job.payload)
    if policy is not None and not no_retry:  # its exception class (and bases) decide
        text = f"{type(error).__module__}.{type(error).__qualname__}: {error}"
        no_retry = not retry_policy.retries_error(policy, text, retry_policy.exception_paths(error))
    failure = _failure(error, no_retry=no_retry)
    if no_retry or not bodies.will_retry(job):
        detail = failure.result
        error_entry = TaskError(
            exception_class_path=detail["exceptionClassPath"], traceback=detail["traceback"]
        )
        task_finished.send(sender, task_result=results.ended(running, error=error_entry))
    return failure


def _failure(error: BaseException, *, no_retry: bool) -> JobResult:
    path = f"{type(error).__module__}.{type(error).__qualname__}"
    trace = "".join(traceback.format_exception(error))
    if len(trace) > TRACEBACK_CHARS:
        trace = "...\n" + trace[-TRACEBACK_CHARS:]
    detail: dict[str, Any] = {"exceptionClassPath": path, "traceback": trace}
    return JobResult.failure(f"{path}: {error}", no_retry=no_retry, result=detail)


def register() -> None:
    """Register the handler and the task kind (no authContext: a task has no user)."""
    handlers.register_handler(payload.AGENT_ID)(run_task)
    contracts.register_kind(payload.KIND, worker_group="chat", auth_context_required=False)
    limits.adapters[payload.KIND] = limits.KindAdapter(payload.task_path, payload.argument)


def register_if_configured() -> None:
    """`register`, when `TASKS` names a Receipt backend (called at app start in every
    process, so workers know the agent and the enqueuing side knows the kind)."""
    for params in (getattr(settings, "TASKS", None) or {}).values():
        try:
            backend = import_string(params["BACKEND"])
        except (ImportError, KeyError, TypeError):
            continue  # the framework's own check names a bad backend
        task_class = getattr(backend, "task_class", None)
        if isinstance(task_class, type) and issubclass(task_class, ReceiptTask):
            register()
            return
