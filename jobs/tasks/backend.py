"""The Receipt backend of Django's task framework: every enqueue of a `@task` is a Receipt
job (agent `django-task`, kind `django.task`), so receipts, the fold, the admin,
diagnosis, live events, callbacks and retention all apply to it.

    TASKS = {"default": {"BACKEND": "jobs.tasks.ReceiptBackend",
                         "QUEUES": ["default"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}

The enqueue is the queue's own (`jobs.queue.enqueue`), in the caller's transaction: a
rolled-back transaction takes the job with it, and its delivery starts only after the
commit. Results are read from the receipts (`jobs.tasks.results`). Queue names are
worker groups: `default` runs where the task kind's contract says (chat); any other
name must be a declared worker group.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jobs import queue
from jobs.core import retry_policy
from jobs.core.attempts import History
from jobs.core.groups import TO_DECLARE
from jobs.errors import InvalidRequest
from jobs.tasks import payload, results
from jobs.tasks.framework import (
    DEFAULT_TASK_PRIORITY,
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from jobs.tasks.options import ReceiptTask, backend_defaults, options_of
from jobs.timing_config import current_timing


def declared_groups() -> tuple[str, ...]:
    """The worker groups a queue name may name: this deployment's, built-in and declared."""
    return current_timing().group_names()


class ReceiptBackend(BaseTaskBackend):
    task_class = ReceiptTask
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.defaults = backend_defaults(alias, self.options)
        self._planned: dict[int, _Plan] = {}  # by id(task): see `_plan`
        known = {DEFAULT_TASK_QUEUE_NAME, *declared_groups()}
        unknown = sorted(set(self.queues) - known)
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['QUEUES'] names {', '.join(unknown)}, which are not "
                f"worker groups; a queue is {DEFAULT_TASK_QUEUE_NAME!r} or one of "
                f"{', '.join(declared_groups())}; {TO_DECLARE}"
            )

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)  # priority within -100..100 (Receipt's own range too)
        if task.queue_name != DEFAULT_TASK_QUEUE_NAME and task.queue_name not in declared_groups():
            raise InvalidTask(
                f"Queue '{task.queue_name}' is not a worker group; declared: "
                f"{', '.join(declared_groups())}; {TO_DECLARE}"
            )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        plan = self._plan(task)
        body = payload.build(task, args, kwargs, backend=self.alias)
        if plan.retry is not None:  # the worker reads the task's policy from its job
            body[retry_policy.PAYLOAD_KEY] = plan.retry.to_wire()
        try:
            enqueued = queue.enqueue(payload.AGENT_ID, body, **plan.options)
        except InvalidRequest as error:  # payload too large or too deep: nothing written
            raise InvalidTask(f"{task.module_path}: {error}") from None
        if not enqueued.created:  # the job under its id, or the one a singleton steered
            return self._existing(enqueued.job.job_id)
        result = results.build(task, History(enqueued.job, (), None))
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        found = results.history(result_id)
        if found is None or found.job is None:
            raise TaskResultDoesNotExist(result_id)
        return results.build(payload.task_of(found.job.payload), found)

    def _existing(self, job_id: str) -> TaskResult:
        try:
            return self.get_result(job_id)
        except TaskResultDoesNotExist:
            raise InvalidTask(f"job {job_id} exists and is not a task's") from None

    def _plan(self, task: Task) -> _Plan:
        """The task validated, with the options its enqueues pass: made once per task and
        configuration. A `Task` is frozen (`.using()` makes a new one), and what else
        validation reads, the declared worker groups, changes only with the settings."""
        timing = current_timing()
        plan = self._planned.get(id(task))
        if plan is not None and plan.task is task and plan.timing is timing:
            return plan
        self.validate_task(task)
        own = options_of(task)
        if own.max_attempts is None and self.defaults.max_attempts is not None:
            own = dataclasses.replace(own, max_attempts=self.defaults.max_attempts)
        options = {
            "job_id": own.job_id,
            "session_key": own.session_key,
            "singleton_mode": own.singleton,
            "max_attempts": own.max_attempts,
            "policy_max_attempts": own.retry.max_attempts if own.retry else None,
            "code_policy": own.retry is not None,
            **_scheduling(task),
        }
        if len(self._planned) >= PLANS_KEPT:  # tasks made per call by `.using()`
            self._planned.clear()
        plan = _Plan(task, timing, options, own.retry)
        self._planned[id(task)] = plan
        return plan


PLANS_KEPT = 256


@dataclasses.dataclass(frozen=True)
class _Plan:
    task: Task
    timing: Any
    options: dict[str, Any]  # the keywords of `queue.enqueue`
    retry: Any  # the task's RetryPolicy, if it has one


def _scheduling(task: Task) -> dict[str, Any]:
    """run_after, priority and queue as the queue's enqueue takes them, only when not the
    defaults: epoch ms, -100..100, a worker group."""
    extra: dict[str, Any] = {}
    if task.run_after is not None:
        extra["run_at"] = int(task.run_after.timestamp() * 1000)
    if task.priority != DEFAULT_TASK_PRIORITY:
        extra["priority"] = task.priority
    if task.queue_name != DEFAULT_TASK_QUEUE_NAME or task.queue_name in declared_groups():
        extra["queue"] = task.queue_name  # "default" is the kind's route, unless so declared
    return extra
