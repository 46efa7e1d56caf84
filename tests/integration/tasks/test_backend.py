"""The Receipt backend of Django's task framework (issue 33 item 2), one test per behaviour
Django's task documentation describes, on both databases. Tasks run on the real attempt
machine in this process (`receipt_worker`, issue 33 item 6)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from jobs import queue
from jobs.models import Job
from jobs.tasks import ReceiptBackend
from jobs.tasks.errors import TaskNotImportable
from jobs.tasks.framework import (
    InvalidTask,
    Task,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from receipts import store
from tests.integration.jobs.helpers import assert_read_model_matches_receipts
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db


def at(ms: int) -> datetime:
    """A receipt's ms timestamp as the task result shows it."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@pytest.fixture
def signals() -> Iterator[list[tuple[str, type, Any]]]:
    """(signal, sender, status of its task result) for every task signal sent."""
    seen: list[tuple[str, type, Any]] = []
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receiver(sender: type, task_result: Any, name: str = name, **_: Any) -> None:
            seen.append((name, sender, task_result.status))

        receivers[signal] = receiver
        signal.connect(receiver)
    yield seen
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


def test_the_backend_is_configured_and_supports_every_feature():
    """Configuring a backend, retrieving it, introspecting it."""
    backend = task_backends["default"]
    assert isinstance(backend, ReceiptBackend) and backend.alias == "default"
    assert default_task_backend.supports_get_result  # the proxy to the "default" backend
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_a_task_is_a_task_instance_defined_at_module_level():
    assert isinstance(defs.add, Task) and defs.add.name == "add"
    assert defs.add.module_path == "tests.integration.tasks.defs.add"

    def local() -> None: ...

    with pytest.raises(InvalidTask, match="module level"):
        task(local)


def test_an_enqueue_is_a_receipt_job_and_returns_a_ready_result():
    result = defs.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert (result.args, result.kwargs, result.backend) == ([2], {"b": 3}, "default")
    assert result.task.func is defs.add.func
    job = queue.get(result.id)
    assert job is not None and job.status == "queued"
    assert (job.agent_id, job.kind) == ("django-task", "django.task")
    assert job.payload == {
        "kind": "django.task",
        "task": "tests.integration.tasks.defs.add",
        "args": [2],
        "kwargs": {"b": 3},
        "backend": "default",
    }
    assert result.enqueued_at == at(job.created_at)
    assert result.started_at is None and result.finished_at is None
    assert result.worker_ids == [] and result.errors == [] and result.attempts == 0
    assert len(result.id) <= 64
    assert store.verify(job.stream).ok
    assert_read_model_matches_receipts(result.id)


def test_a_result_is_read_back_from_the_receipts_and_refreshed(receipt_worker):
    result = defs.add.enqueue(2, 3)
    with pytest.raises(ValueError, match="not finished yet"):
        _ = result.return_value
    drained = receipt_worker.run()
    assert [job.job_id for job in drained.jobs] == [result.id]
    assert result.status == TaskResultStatus.READY  # a result is a snapshot ...
    result.refresh()  # ... until it is refreshed from the fold
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    fetched = defs.add.get_result(result.id)
    any_task = default_task_backend.get_result(result.id)
    for read in (fetched, any_task):
        assert read.status == TaskResultStatus.SUCCESSFUL and read.return_value == 5
        assert read.task.func is defs.add.func
    assert result.last_attempted_at == result.started_at
    job = queue.get(result.id)
    assert result.worker_ids == [job.worker_id] and result.attempts == 1
    receipts = store.read(job.stream)
    assert [r.type for r in receipts] == [
        "job.enqueued",
        "job.leased",
        "job.heartbeat",
        "job.completed",
    ]
    assert (result.started_at, result.finished_at) == (at(receipts[1].ts), at(receipts[3].ts))


def test_get_result_of_another_task_is_a_mismatch(receipt_worker):
    result = defs.add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        defs.echo.get_result(result.id)


@pytest.mark.parametrize("result_id", ["no-such-job", "not a job id!", "x" * 200])
def test_an_unknown_result_does_not_exist(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_a_job_that_is_not_a_tasks_is_no_task_result():
    job = queue.enqueue(
        "my-agent", {"kind": "factory.run", "authContext": {"userId": "u", "organizationId": "o"}}
    ).job
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(job.job_id)


def test_a_failed_task_keeps_every_attempts_exception_class_and_traceback(receipt_worker):
    result = defs.raise_custom.enqueue()
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.attempts == 2  # Receipt's default max attempts, each retried at once here
    assert len(result.errors) == 2
    for error in result.errors:
        assert error.exception_class_path == "tests.integration.tasks.defs.CustomError"
        assert error.exception_class is defs.CustomError
        assert "raise CustomError" in error.traceback
        assert error.traceback.rstrip().endswith("CustomError: custom failure")
    job = queue.get(result.id)
    leases = [r.ts for r in store.read(job.stream) if r.type == "job.leased"]
    assert (result.started_at, result.last_attempted_at) == (at(leases[0]), at(leases[1]))
    assert job.status == "failed"
    assert job.last_error == "tests.integration.tasks.defs.CustomError: custom failure"


def test_a_builtin_exception_resolves_to_its_class(receipt_worker):
    result = defs.boom.enqueue("no")
    receipt_worker.run()
    result.refresh()
    assert result.errors[0].exception_class_path == "builtins.ValueError"
    assert result.errors[0].exception_class is ValueError


def test_the_context_gives_the_attempt_number_and_the_result(receipt_worker):
    result = defs.attempt_number.enqueue(fail_until=1)
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    job = queue.get(result.id)
    assert result.return_value == {
        "attempt": 2,
        "id": result.id,
        "workers": [job.worker_id, job.worker_id],
    }
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"]


def test_an_async_task_runs_to_completion(receipt_worker):
    result = defs.async_double.enqueue(21)
    receipt_worker.run()
    result.refresh()
    value: Any = result.return_value  # the awaited value, not a coroutine
    assert result.status == TaskResultStatus.SUCCESSFUL and value == 42


def test_the_async_variants_enqueue_read_and_refresh(receipt_worker):
    result = async_to_sync(defs.add.aenqueue)(4, 5)
    assert queue.get(result.id).status == "queued"
    receipt_worker.run()
    read = async_to_sync(defs.add.aget_result)(result.id)
    assert read.return_value == 9
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert async_to_sync(default_task_backend.aget_result)(result.id).return_value == 9


def test_using_returns_a_modified_copy_and_leaves_the_task_as_is():
    assert defs.add.priority == 0
    assert defs.add.using(priority=10).priority == 10
    assert defs.add.priority == 0


def test_arguments_that_are_not_json_are_refused_before_anything_is_written():
    before = Job.objects.count()
    with pytest.raises(TypeError, match="not JSON serializable"):
        defs.echo.enqueue(datetime.now(tz=UTC))
    with pytest.raises(TypeError, match="dict key 1"):
        defs.echo.enqueue({1: "one"})
    with pytest.raises(TypeError, match="keyword arguments"):
        defs.echo.enqueue(value=float("nan"))
    assert Job.objects.count() == before


def test_arguments_make_a_json_round_trip_so_a_tuple_comes_back_a_list(receipt_worker):
    """Django's own example: the task gets a list, which is no dict key."""
    result = defs.double_dictionary.enqueue((1, 2, 3))
    assert result.args == [[1, 2, 3]]
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError
    assert "unhashable type: 'list'" in result.errors[0].traceback


def test_a_return_value_that_is_not_json_fails_without_a_retry(receipt_worker):
    result = defs.returns_datetime.enqueue()
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    assert result.errors[0].exception_class is TypeError
    assert "return value" in str(queue.get(result.id).last_error)


def test_the_signals_fire_on_enqueue_start_and_finish(receipt_worker, signals):
    succeeded = defs.add.enqueue(1, 2)
    assert signals == [("enqueued", ReceiptBackend, TaskResultStatus.READY)]
    receipt_worker.run()
    assert signals[1:] == [
        ("started", ReceiptBackend, TaskResultStatus.RUNNING),
        ("finished", ReceiptBackend, TaskResultStatus.SUCCESSFUL),
    ]
    signals.clear()
    defs.boom.enqueue("no")
    receipt_worker.run()
    # started per attempt; finished once, when no attempt is left
    assert [name for name, _, _ in signals] == ["enqueued", "started", "started", "finished"]
    assert signals[-1][2] == TaskResultStatus.FAILED
    assert succeeded.id


def test_the_finished_signal_sees_the_recorded_completion(receipt_worker):
    seen = []

    def receiver(sender: type, task_result: Any, **_: Any) -> None:
        seen.append(default_task_backend.get_result(task_result.id).status)

    task_finished.connect(receiver)
    try:
        defs.add.enqueue(1, 1)
        receipt_worker.run()
    finally:
        task_finished.disconnect(receiver)
    assert seen == [TaskResultStatus.SUCCESSFUL]


def test_a_payload_never_runs_what_is_not_a_task(receipt_worker):
    """An enqueue from elsewhere (the HTTP API) may name any path: only a Task runs."""
    ids = [
        queue.enqueue(
            "django-task", {"kind": "django.task", "task": path, "args": [], "kwargs": {}}
        ).job.job_id
        for path in (
            "tests.integration.tasks.defs.plain_function",
            "os.getcwd",
            "no_such_module.task",
            "not a path",
        )
    ]
    drained = receipt_worker.run()
    for job_id in ids:
        job = drained.job(job_id)
        assert job.status == "failed" and job.attempt == 1  # not retried
        assert job.last_error.startswith("jobs.tasks.errors.TaskNotImportable: task ")
    assert "is a function, not a task" in drained.job(ids[0]).last_error
    assert "outside the installed apps" in drained.job(ids[2]).last_error
    with pytest.raises(TaskNotImportable):  # and no result pretends it is one
        default_task_backend.get_result(ids[0])


def test_a_payload_never_imports_a_module_outside_the_project(receipt_worker):
    """Importing runs a module's code: a payload may name only what the process loaded or
    a module of an installed app, never, say, a module of the standard library."""
    assert "this" not in sys.modules  # importing it would print the Zen of Python
    job_id = queue.enqueue(
        "django-task", {"kind": "django.task", "task": "this.task", "args": [], "kwargs": {}}
    ).job.job_id
    drained = receipt_worker.run()
    assert "outside the installed apps" in drained.job(job_id).last_error
    assert "this" not in sys.modules


def test_a_task_must_import_by_its_module_path():
    renamed = task(defs.plain_function)  # a Task nobody can import as plain_function
    with pytest.raises(InvalidTask, match="not a task"):
        renamed.enqueue()


def test_a_task_whose_path_imports_another_function_is_refused():
    def add(a: int, b: int) -> int:  # claims defs.add's path, but is not its function
        return a - b

    add.__module__, add.__qualname__ = defs.__name__, "add"
    impostor = task(add)
    assert impostor.module_path == defs.add.module_path
    with pytest.raises(InvalidTask, match="does not import as this task"):
        impostor.enqueue(1, 2)
    assert defs.add.enqueue(1, 2).status  # the real one still enqueues
