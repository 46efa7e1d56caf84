"""run_after, priority and queue_name of a task reach the queue's enqueue as `run_at`
(epoch ms), `priority` and `queue` (a worker group), and only when not the defaults
(issue 33 item 2, with items 3, 4 and 5 of the same issue)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings

from jobs import queue
from jobs.models import Job
from jobs.tasks.framework import TaskResultStatus, default_task_backend
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db

SCHEDULING = ("run_at", "priority", "queue")
QUEUES = {"default": {"BACKEND": "jobs.tasks.ReceiptBackend", "QUEUES": ["default", "control"]}}


@pytest.fixture
def sent(monkeypatch) -> list[dict[str, Any]]:
    """The options each enqueue passes to the queue (the real enqueue still runs)."""
    seen: list[dict[str, Any]] = []
    real = queue.enqueue

    def recording(agent_id: str, payload: Any, **options: Any) -> Any:
        seen.append(options)
        return real(agent_id, payload, **options)

    monkeypatch.setattr(queue, "enqueue", recording)
    return seen


def test_defaults_pass_no_scheduling_option(sent):
    defs.add.enqueue(1, 2)
    assert not set(sent[0]) & set(SCHEDULING)


def test_a_priority_given_to_the_decorator_is_the_tasks(sent):
    assert defs.urgent_add.priority == 7
    defs.urgent_add.enqueue(1, 2)
    assert sent[0]["priority"] == 7


def test_set_values_pass_as_the_queues_options_and_stay_on_the_result(sent):
    at = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(days=2)
    with override_settings(TASKS=QUEUES):
        result = defs.add.using(priority=10, run_after=at, queue_name="control").enqueue(1, 2)
        assert {k: sent[0][k] for k in SCHEDULING} == {
            "run_at": int(at.timestamp() * 1000),
            "priority": 10,
            "queue": "control",
        }
        job = queue.get(result.id)
        assert job.payload["priority"] == 10 and job.payload["queueName"] == "control"
        assert job.payload["runAfter"] == at.isoformat()
        read = default_task_backend.get_result(result.id)
        assert (read.task.priority, read.task.queue_name, read.task.run_after) == (
            10,
            "control",
            at,
        )


def test_a_tasks_priority_is_the_jobs():
    result = defs.add.using(priority=-40).enqueue(1, 2)
    assert queue.get(result.id).priority == -40


def test_a_task_with_run_after_waits_for_its_time(receipt_worker):
    later = defs.add.using(run_after=datetime.now(tz=UTC) + timedelta(hours=1)).enqueue(1, 2)
    now = defs.add.using(run_after=datetime.now(tz=UTC) - timedelta(seconds=1)).enqueue(3, 4)
    drained = receipt_worker.run()
    assert [job.job_id for job in drained.jobs] == [now.id]
    assert later.id in drained.left
    later.refresh()
    assert later.status == TaskResultStatus.READY and later.attempts == 0


def test_a_queue_name_routes_the_job_to_that_worker_group():
    with override_settings(TASKS=QUEUES):
        result = defs.add.using(queue_name="control").enqueue(1, 2)
    assert Job.objects.get(pk=result.id).worker_group == "control"
    default = defs.add.enqueue(1, 2)
    assert Job.objects.get(pk=default.id).worker_group == "chat"
