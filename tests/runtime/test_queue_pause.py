"""Pausing a queue (issue 34 item 5) with real runworkers: a paused group's runworker
takes none of its jobs though the driver hop runs, and once resumed it runs them."""

from __future__ import annotations

from jobs import queue, queues
from jobs.core.contracts import routed_group
from jobs.models import DeliveryPromise, WorkerProcess
from tests.conftest import wait_for
from tests.runtime.helpers import enqueue, wait_status

AGENT = "test-echo"


def test_a_paused_group_runs_nothing_and_runs_once_resumed(stack):
    group = routed_group(AGENT, "factory.run", None)
    stack.start("driver")
    worker = stack.start(group)
    queues.pause(group, by="ops")
    job = enqueue(AGENT)
    execute = wait_for(
        lambda: DeliveryPromise.objects.filter(job_id=job.job_id, function="execute").first(),
        timeout=30,
        message="the driver hop to open the execute promise",
    )
    opened = execute.created_at
    # the group's runworker beats on two seconds past the promise (its pusher looks at
    # least once a second): a take would have pushed available_at forward
    wait_for(
        lambda: WorkerProcess.objects.filter(pid=worker.pid, last_seen__gt=opened + 2_000).exists(),
        timeout=30,
        message="a beat of the paused group's runworker",
    )
    execute.refresh_from_db()
    assert (execute.worker_id, execute.available_at <= opened) == (None, True)
    assert queue.get(job.job_id).status == "queued"

    queues.resume(group, by="ops")
    assert wait_status(job.job_id, "completed").status == "completed"
