"""Receipt's own enqueue options for tasks: a job id (an idempotent enqueue), a session key
with a singleton mode, max attempts.

The framework fixes `Task.using(priority=, queue_name=, run_after=, backend=)`, so these
travel on the task itself: the Receipt backend's task class (`ReceiptTask`) carries a
`receipt` field that `.using()` keeps, set with `receipt_options`:

    send_receipt_email.enqueue(7)                                   # backend defaults
    receipt_options(send_receipt_email, job_id="receipt-email-7").enqueue(7)
    receipt_options(send_receipt_email, max_attempts=5).using(priority=10).enqueue(7)
    receipt_options(call_provider, retry=RetryPolicy(max_attempts=12, base_ms=2_000,
                    never_retry=("myapp.errors.BadRequest",))).enqueue(7)

Backend-wide defaults come from `TASKS[alias]["OPTIONS"]` (`MAX_ATTEMPTS`). Options are
checked when they are set, so a bad one fails where it is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from jobs.core.retry_policy import RetryPolicy
from jobs.core.vocabulary import SINGLETON_MODES, validate_job_id
from jobs.tasks.framework import InvalidTask, InvalidTaskBackend, Task
from jobs.validation import MAX_SESSION_KEY

# The framework lets a result id be up to 64 characters; a job id may be longer.
MAX_TASK_JOB_ID = 64
BACKEND_OPTIONS = ("MAX_ATTEMPTS",)
T = TypeVar("T", bound=Task)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptOptions:
    """`singleton`: `allow` (the default: the key only groups jobs), `cancel` (cancel or
    abort the key's active jobs, then enqueue) or `steer` (an active job on the key is
    returned instead of a new one). `max_attempts` is clamped to 1..8 like every enqueue.
    `retry`: the task's `RetryPolicy` (backoff, which exceptions retry, and attempts: a
    policy's `max_attempts` may exceed 8; an explicit `max_attempts` still wins)."""

    job_id: str | None = None
    session_key: str | None = None
    singleton: str | None = None
    max_attempts: int | None = None
    retry: RetryPolicy | None = None

    def __post_init__(self) -> None:
        if self.job_id is not None:
            try:
                validate_job_id(self.job_id)
            except ValueError as error:
                raise InvalidTask(f"job_id: {error}") from None
            if len(self.job_id) > MAX_TASK_JOB_ID:
                raise InvalidTask(
                    f"job_id must be at most {MAX_TASK_JOB_ID} characters (a task result id)"
                )
        if self.session_key is not None and (
            not isinstance(self.session_key, str)
            or not self.session_key.strip()
            or len(self.session_key) > MAX_SESSION_KEY
        ):
            raise InvalidTask(
                f"session_key must be a non-empty string of at most {MAX_SESSION_KEY} characters"
            )
        if self.singleton is not None and self.singleton not in SINGLETON_MODES:
            raise InvalidTask(
                f"singleton must be one of {', '.join(SINGLETON_MODES)}; got {self.singleton!r}"
            )
        if self.singleton not in (None, "allow") and self.session_key is None:
            raise InvalidTask(f"singleton {self.singleton!r} needs a session_key")
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int)
        ):
            raise InvalidTask(f"max_attempts must be an integer; got {self.max_attempts!r}")
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidTask(f"retry must be a RetryPolicy; got {self.retry!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptTask(Task):
    """A task on a Receipt backend: the framework's, plus Receipt's enqueue options."""

    receipt: ReceiptOptions = dataclasses.field(default_factory=ReceiptOptions)


_UNSET: Any = object()


def receipt_options(
    task: T,
    *,
    job_id: str | None = _UNSET,
    session_key: str | None = _UNSET,
    singleton: str | None = _UNSET,
    max_attempts: int | None = _UNSET,
    retry: RetryPolicy | None = _UNSET,
) -> ReceiptTask:
    """`task` with Receipt's enqueue options set (the ones not given are kept); the task
    must run on a Receipt backend. Chains with `.using()` either way round."""
    if not issubclass(task.get_backend().task_class, ReceiptTask):  # a Receipt backend
        raise InvalidTask(
            f"receipt_options needs a task on a Receipt backend; {task.module_path} runs on "
            f"backend {task.backend!r}"
        )
    given: dict[str, Any] = {
        "job_id": job_id,
        "session_key": session_key,
        "singleton": singleton,
        "max_attempts": max_attempts,
        "retry": retry,
    }
    current = task.receipt if isinstance(task, ReceiptTask) else ReceiptOptions()
    options = dataclasses.replace(
        current, **{key: value for key, value in given.items() if value is not _UNSET}
    )
    if isinstance(task, ReceiptTask):
        return dataclasses.replace(task, receipt=options)
    fields = {f.name: getattr(task, f.name) for f in dataclasses.fields(task) if f.init}
    return ReceiptTask(**fields, receipt=options)


def options_of(task: Task) -> ReceiptOptions:
    return task.receipt if isinstance(task, ReceiptTask) else ReceiptOptions()


def backend_defaults(alias: str, options: Any) -> ReceiptOptions:
    """`TASKS[alias]["OPTIONS"]` as defaults; InvalidTaskBackend naming a bad key."""
    if not isinstance(options, dict):
        raise InvalidTaskBackend(f"TASKS[{alias!r}]['OPTIONS'] must be a dict")
    unknown = sorted(set(options) - set(BACKEND_OPTIONS))
    if unknown:
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {', '.join(unknown)}; "
            f"the Receipt backend reads {', '.join(BACKEND_OPTIONS)}"
        )
    try:
        return ReceiptOptions(max_attempts=options.get("MAX_ATTEMPTS"))
    except InvalidTask as error:
        raise InvalidTaskBackend(f"TASKS[{alias!r}]['OPTIONS']: {error}") from None
