"""Receipt's own options on tasks, the backend's configuration, and results for every job
status (issue 33 item 2), on both databases."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import pytest
from django.test import override_settings

from jobs import queue
from jobs.core.state import Fence
from jobs.models import Job
from jobs.tasks import ReceiptTask, receipt_options
from jobs.tasks.framework import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
)
from jobs.tasks.results import moment
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db


def receipt_backend(**params: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": "jobs.tasks.ReceiptBackend", **params}}


def test_a_job_id_makes_the_enqueue_idempotent(receipt_worker):
    sent: list[str] = []

    def count(sender: type, task_result: Any, **_: Any) -> None:
        sent.append(task_result.id)

    once = receipt_options(defs.add, job_id="order-7-total")
    task_enqueued.connect(count)
    try:
        first = once.enqueue(3, 4)
        second = once.enqueue(30, 40)  # the job under that id is returned unchanged
    finally:
        task_enqueued.disconnect(count)
    assert first.id == second.id == "order-7-total"
    assert second.args == [3, 4] and sent == ["order-7-total"]
    assert Job.objects.filter(pk="order-7-total").count() == 1
    receipt_worker.run()
    third = once.enqueue(5, 5)  # done: still the same job, with its result
    assert third.status == TaskResultStatus.SUCCESSFUL and third.return_value == 7


def test_a_job_id_taken_by_a_job_that_is_not_a_task_is_refused():
    queue.enqueue(
        "my-agent",
        {"kind": "factory.run", "authContext": {"userId": "u", "organizationId": "o"}},
        job_id="taken-id",
    )
    with pytest.raises(InvalidTask, match="taken-id exists and is not a task"):
        receipt_options(defs.add, job_id="taken-id").enqueue(1, 2)


def test_max_attempts_come_from_the_task_or_the_backends_options(receipt_worker):
    assert queue.get(defs.boom.enqueue("x").id).max_attempts == 2  # Receipt's default
    three = receipt_options(defs.boom, max_attempts=3).enqueue("x")
    assert queue.get(three.id).max_attempts == 3
    receipt_worker.run()
    three.refresh()
    assert three.status == TaskResultStatus.FAILED and three.attempts == 3
    with override_settings(TASKS=receipt_backend(OPTIONS={"MAX_ATTEMPTS": 4})):
        assert queue.get(defs.boom.enqueue("x").id).max_attempts == 4
        one = receipt_options(defs.boom, max_attempts=1).enqueue("x")  # the task's own wins
        assert queue.get(one.id).max_attempts == 1


def test_a_singleton_cancel_replaces_the_queued_job_on_its_session_key(receipt_worker):
    latest = receipt_options(defs.add, session_key="cart-9", singleton="cancel")
    first = latest.enqueue(1, 1)
    second = latest.enqueue(2, 2)
    assert first.id != second.id
    first.refresh()
    assert first.status == TaskResultStatus.FAILED and first.finished_at is not None
    assert first.errors[0].exception_class_path == "jobs.tasks.errors.TaskCanceled"
    assert first.errors[0].traceback == "singleton cancel"
    assert first.errors[0].exception_class.__name__ == "TaskCanceled"
    receipt_worker.run()
    second.refresh()
    assert second.return_value == 4


def test_a_singleton_steer_returns_the_active_job_on_its_session_key():
    keep = receipt_options(defs.add, session_key="report-1", singleton="steer")
    first = keep.enqueue(1, 1)
    again = keep.enqueue(2, 2)
    assert again.id == first.id and again.args == [1, 1]
    assert Job.objects.filter(session_key="report-1").count() == 1


def test_options_are_checked_where_they_are_set():
    with pytest.raises(InvalidTask, match="job_id"):
        receipt_options(defs.add, job_id="no spaces")
    with pytest.raises(InvalidTask, match="at most 64"):
        receipt_options(defs.add, job_id="x" * 65)
    with pytest.raises(InvalidTask, match="needs a session_key"):
        receipt_options(defs.add, singleton="cancel")
    with pytest.raises(InvalidTask, match="singleton must be one of"):
        receipt_options(defs.add, session_key="k", singleton="replace")
    with pytest.raises(InvalidTask, match="max_attempts must be an integer"):
        receipt_options(defs.add, max_attempts="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidTask, match="session_key"):
        receipt_options(defs.add, session_key="")


def test_options_and_using_chain_either_way_round():
    a = receipt_options(defs.add, job_id="j-1").using(priority=5)
    b = receipt_options(defs.add.using(priority=5), job_id="j-1")
    for chained in (a, b):
        assert isinstance(chained, ReceiptTask)
        assert chained.priority == 5 and chained.receipt.job_id == "j-1"
    kept = receipt_options(a, max_attempts=3)  # the options not given are kept
    assert (kept.receipt.job_id, kept.receipt.max_attempts) == ("j-1", 3)
    assert isinstance(defs.add, ReceiptTask)  # the Receipt backend's task class
    assert defs.add.receipt.job_id is None  # the task itself is as defined


def test_options_need_a_receipt_backend():
    immediate = {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}
    with override_settings(TASKS={**receipt_backend(), "immediate": immediate}):
        elsewhere = defs.add.using(backend="immediate")
        with pytest.raises(InvalidTask, match="Receipt backend"):
            receipt_options(elsewhere, job_id="j-2")


def test_a_queue_that_is_not_a_worker_group_is_refused_saying_how_to_declare_one():
    with (
        override_settings(TASKS=receipt_backend(QUEUES=["default", "emails"])),
        pytest.raises(InvalidTaskBackend) as caught,
    ):
        task_backends["default"]
    assert str(caught.value) == (
        "TASKS['default']['QUEUES'] names emails, which are not worker groups; a queue is "
        "'default' or one of chat, control, codex; to add a group, declare it in "
        "RECEIPT['worker_groups'] (or the RECEIPT_WORKER_GROUPS environment variable)"
    )


def test_the_backend_refuses_a_bad_configuration():
    for params, problem in (
        ({"QUEUES": ["default", "emails"]}, "names emails, which are not worker groups"),
        ({"OPTIONS": {"RETRIES": 3}}, "unknown keys RETRIES"),
        ({"OPTIONS": {"MAX_ATTEMPTS": "3"}}, "max_attempts must be an integer"),
    ):
        with (
            override_settings(TASKS=receipt_backend(**params)),
            pytest.raises(InvalidTaskBackend, match=problem),
        ):
            task_backends["default"]


def test_queue_names_are_limited_to_the_backends_queues_and_worker_groups():
    with override_settings(TASKS=receipt_backend(QUEUES=["default", "control"])):
        assert defs.add.using(queue_name="control").queue_name == "control"
        with pytest.raises(InvalidTask, match="Queue 'codex' is not valid"):
            defs.add.using(queue_name="codex")
    with override_settings(TASKS=receipt_backend(QUEUES=[])):  # no list: any worker group
        assert defs.add.using(queue_name="codex").queue_name == "codex"
        with pytest.raises(InvalidTask, match="not a worker group"):
            defs.add.using(queue_name="emails")


@pytest.mark.parametrize("priority", [-100, 0, 100])
def test_priorities_within_receipts_range_are_accepted(priority):
    assert defs.add.using(priority=priority).priority == priority


@pytest.mark.parametrize("priority", [-101, 101, 1.5])
def test_priorities_outside_it_are_refused(priority):
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        defs.add.using(priority=priority)


def test_run_after_must_be_aware():
    with pytest.raises(InvalidTask, match="aware"):
        defs.add.using(run_after=datetime(2030, 1, 1))


def test_a_running_job_reads_as_running_and_a_lost_attempt_as_an_error():
    result = defs.add.enqueue(1, 2)
    lease = queue.lease(result.id, worker_id="w-1")
    assert lease.applied and lease.job is not None and lease.job.lease_until is not None
    running = default_task_backend.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING and running.worker_ids == ["w-1"]
    assert running.started_at == running.last_attempted_at and running.finished_at is None
    later = lease.job.lease_until + 1
    expired = queue.expire_lease(result.id, now_ms=later)
    assert expired.applied and expired.job.status == "queued"
    waiting = default_task_backend.get_result(result.id)
    assert waiting.status == TaskResultStatus.READY and waiting.attempts == 1
    assert waiting.errors[0].exception_class_path == "jobs.tasks.errors.TaskAttemptFailed"
    assert waiting.errors[0].traceback == "lease expired"
    queue.lease(result.id, worker_id="w-2", now_ms=later + 1)
    queue.complete(result.id, 3, fence=Fence("w-2", 2), now_ms=later + 2)
    done = default_task_backend.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3
    assert done.worker_ids == ["w-1", "w-2"]
    assert done.started_at == running.started_at
    assert (done.last_attempted_at, done.finished_at) == (moment(later + 1), moment(later + 2))


def test_a_task_is_checked_again_when_the_declared_groups_change(settings):
    """The backend checks a task once per configuration (a `Task` is frozen): a group
    declared when the task was made and gone later refuses its next enqueue."""
    emails = {"emails": {"concurrency": 1, "lease_ms": 60_000, "execution_timeout_ms": 20_000}}
    declared = settings.RECEIPT
    settings.RECEIPT = dataclasses.replace(declared, worker_groups=emails)
    with override_settings(TASKS=receipt_backend(QUEUES=[])):
        mailer = defs.add.using(queue_name="emails")
        first = mailer.enqueue(1, 2)
        assert Job.objects.get(pk=first.id).worker_group == "emails"
        assert Job.objects.get(pk=mailer.enqueue(3, 4).id).worker_group == "emails"
        settings.RECEIPT = declared
        with pytest.raises(InvalidTask) as caught:
            mailer.enqueue(5, 6)
        assert str(caught.value) == (
            "Queue 'emails' is not a worker group; declared: chat, control, codex; to add a "
            "group, declare it in RECEIPT['worker_groups'] (or the RECEIPT_WORKER_GROUPS "
            "environment variable)"
        )
    assert Job.objects.filter(worker_group="emails").count() == 2
