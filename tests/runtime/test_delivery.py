"""The delivery runtime with real runworker processes (D-2..D-10, L-1, L-2, C-3)."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings
from django.db import connection

from jobs import queue
from jobs.models import DeliveryPromise
from receipts import store
from tests.conftest import wait_for
from tests.runtime.helpers import assert_settled_once, enqueue, receipt_types, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]


def test_happy_path_runs_on_the_routed_role_with_every_receipt(each_broker):
    stack = each_broker
    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-echo", message="hello")
    done = wait_status(job.job_id, "completed")
    assert done.result["echo"] == "hello" and done.result["group"] == "chat"
    assert receipt_types(job.job_id) == [
        "job.enqueued",
        "job.leased",
        "job.heartbeat",
        "job.completed",
    ]
    states = dict(
        DeliveryPromise.objects.filter(job_id=job.job_id).values_list("function", "state")
    )
    assert states == {"driver": "resolved", "execute": "resolved"}
    assert len(stack.marks("start", job.job_id)) == 1
    assert_settled_once(job.job_id)


CHAT_DEFAULT_LEASE_MS = 300_000  # production's chat lease, beside the stack's short one


@pytest.mark.postgres_only
@pytest.mark.parametrize("lease_ms", [None, CHAT_DEFAULT_LEASE_MS], ids=["test-lease", "default"])
def test_a_backlog_drains_with_each_begin_sent_with_the_completion_before_it(
    stack, monkeypatch, lease_ms
):
    """A worker that finds its next task waiting completes one job and begins the next in
    one statement (one transaction: its receipts share the transaction id); every job
    still runs its handler once, with every receipt, settled once; under the stack's short
    lease and under production's."""
    if lease_ms is not None:
        monkeypatch.setattr(
            settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, job_lease_ms=lease_ms)
        )
        stack.env["JOB_LEASE_MS"] = str(lease_ms)
    jobs = [enqueue("test-echo", message=str(i)) for i in range(30)]
    stack.start("driver")
    stack.start("chat")
    for job in jobs:
        wait_status(job.job_id, "completed")
    for job in jobs:
        leased = next(r for r in store.read(job.stream) if r.type == "job.leased")
        assert leased.body["leaseUntil"] - leased.ts == int(stack.env["JOB_LEASE_MS"])
        assert receipt_types(job.job_id) == [
            "job.enqueued",
            "job.leased",
            "job.heartbeat",
            "job.completed",
        ]
        assert len(stack.marks("start", job.job_id)) == 1
        assert_settled_once(job.job_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM receipt_receipt c JOIN receipt_receipt l "
            "ON l.xmin = c.xmin AND l.stream <> c.stream "
            "WHERE c.event_type = 'job.completed' AND l.event_type = 'job.leased'"
        )
        (chained,) = cursor.fetchone()
    assert chained >= 1


def test_each_group_runs_only_on_its_own_cluster(stack):
    stack.start("driver")
    for role in ("chat", "control", "codex"):
        stack.start(role)
    jobs = {
        "chat": enqueue("test-echo"),
        "control": enqueue("factory-control", kind="factory.objective.control"),
        "codex": enqueue("codex", kind="factory.task.run"),
    }
    for group, job in jobs.items():
        done = wait_status(job.job_id, "completed")
        assert done.result["group"] == group, (group, done.result)
        assert done.worker_id.startswith(f"{group}:")


def test_a_deployment_kind_runs_on_the_group_its_contract_names(stack):
    """P-6, K-3: a kind registered beside its handler is accepted and routed by its
    contract (codex here), not by the agent's default group."""
    from jobs.core import contracts

    contracts.register_kind("test.report", worker_group="codex")  # as the workers' module does
    try:
        stack.start("driver")
        stack.start("codex")
        job = enqueue("test-report", kind="test.report")
        done = wait_status(job.job_id, "completed")
        assert done.result == {"kind": "test.report", "group": "codex"}
        assert done.worker_id.startswith("codex:")
    finally:
        contracts.unregister_kind("test.report")


def test_unknown_agent_fails_non_retryably_with_the_contract_message(stack):
    stack.start("driver")
    stack.start("chat")
    job = enqueue("nobody-home", max_attempts=3)
    failed = wait_status(job.job_id, "failed")
    assert failed.last_error == "No handler for agent 'nobody-home'"
    assert failed.attempt == 1 and failed.result == {"status": "failed"}


def test_handler_exception_is_retried_then_fails(stack):
    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-raise", max_attempts=2)
    failed = wait_status(job.job_id, "failed")
    assert failed.attempt == 2 and "RuntimeError: handler exploded" in failed.last_error
    assert len(stack.marks("start", job.job_id)) == 2
    assert_settled_once(job.job_id)


def test_worker_killed_mid_handler_is_recovered_on_the_next_attempt(each_broker):
    stack = each_broker  # with Redis, the popped task is gone with the worker (no ack)
    stack.start("driver")
    stack.start("chat", name="chat-doomed")
    job = enqueue("test-sleep", sleepMs=60_000, laterSleepMs=10, max_attempts=2)
    wait_for(lambda: stack.marks("start", job.job_id), message="first attempt to start")
    stack.kill("chat-doomed")
    stack.start("chat", name="chat-fresh")
    done = wait_status(job.job_id, "completed", timeout=40)
    assert done.attempt == 2
    types = receipt_types(job.job_id)
    assert "job.lease_expired" in types
    assert [m["attempt"] for m in stack.marks("start", job.job_id)] == [1, 2]
    assert_settled_once(job.job_id)


def test_worker_killed_on_the_last_attempt_fails_with_lease_expired(stack):
    stack.start("driver")
    stack.start("chat", name="chat-doomed")
    job = enqueue("test-sleep", sleepMs=60_000, max_attempts=1)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start")
    stack.kill("chat-doomed")
    failed = wait_status(job.job_id, "failed", timeout=40)
    assert failed.last_error == "lease expired"
    assert_settled_once(job.job_id)


def test_driver_killed_after_opening_the_execute_promise_still_completes_once(stack):
    stack.start("driver", name="driver-doomed", RECEIPT_FAULTS="driver_after_execute_sent")
    stack.start("chat")
    job = enqueue("test-echo")
    done = wait_status(job.job_id, "completed")
    assert done.status == "completed"
    assert stack.marks("fault")[0]["fault"] == "driver_after_execute_sent"
    assert len(stack.marks("start", job.job_id)) == 1
    assert_settled_once(job.job_id)


def test_delivery_lost_after_the_take_is_recovered_by_the_queued_redrive(stack):
    stack.start("chat")
    job = enqueue("test-echo")  # dispatched to the driver cluster, which is not running
    promise = wait_for(
        lambda: DeliveryPromise.objects.filter(job_id=job.job_id).first(), message="driver promise"
    )
    # A driver pusher took it and died before running it: invisible until far later...
    DeliveryPromise.objects.filter(pk=promise.pk).update(available_at=2**62)
    # ...and its timeout passed (as time would).
    DeliveryPromise.objects.filter(pk=promise.pk).update(timeout_at=0)
    stack.start("driver")
    done = wait_status(job.job_id, "completed", timeout=30)
    promise_ids = set(
        DeliveryPromise.objects.filter(job_id=job.job_id, function="driver").values_list(
            "id", flat=True
        )
    )
    assert any(":redrive:" in p for p in promise_ids), promise_ids
    assert done.status == "completed" and len(stack.marks("start", job.job_id)) == 1


def test_duplicate_execute_delivery_settles_once(stack):
    from jobs.runtime import tasks

    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-sleep", sleepMs=1500)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start")
    execute = DeliveryPromise.objects.get(job_id=job.job_id, function="execute")
    # The same promise delivered again, to another process (this one), while it runs...
    assert tasks.execute(execute.id)["status"] == "stale_attempt"
    wait_status(job.job_id, "completed")
    # ...and after it settled.
    assert tasks.execute(execute.id)["status"] == "stale_attempt"
    assert len(stack.marks("start", job.job_id)) == 1
    assert receipt_types(job.job_id).count("job.completed") == 1
    assert_settled_once(job.job_id)


def test_abort_stops_a_running_handler_within_one_heartbeat(stack):
    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-sleep", sleepMs=60_000)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start")
    queue.abort(job.job_id, reason="operator stop", by="ops")
    canceled = wait_status(job.job_id, "canceled", timeout=10)
    assert canceled.cancel_reason == "operator stop"
    assert stack.marks("aborted", job.job_id)
    abort_ts = next(r.ts for r in store.read(job.stream) if r.type == "queue.command")
    cancel_ts = next(r.ts for r in store.read(job.stream) if r.type == "job.canceled")
    assert cancel_ts - abort_ts <= 1333 + 1000  # one heartbeat cadence (4000/3) plus slack
    assert_settled_once(job.job_id)


def test_execution_timeout_fails_the_attempt_and_retries(stack):
    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-stubborn", sleepMs=30_000, laterSleepMs=10, max_attempts=2)
    done = wait_status(job.job_id, "completed", timeout=40)
    failed = [r for r in store.read(job.stream) if r.type == "job.failed"]
    assert len(failed) == 1 and failed[0].body["willRetry"] is True
    assert failed[0].body["error"].startswith("execution timeout after 5000 ms")
    assert done.attempt == 2
    assert_settled_once(job.job_id)


def test_transient_storage_error_during_settlement_is_retried_and_settles_once(stack):
    stack.start("driver")
    stack.start("chat", RECEIPT_FAULTS="settle_transient")
    job = enqueue("test-echo")
    wait_status(job.job_id, "completed")
    assert [m["fault"] for m in stack.marks("fault")] == ["settle_transient"]
    assert receipt_types(job.job_id).count("job.completed") == 1
    assert_settled_once(job.job_id)


def test_steer_reaches_a_running_handler(stack):
    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-commands")
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start")
    queue.steer(job.job_id, {"go": "left"}, by="ops")
    done = wait_status(job.job_id, "completed")
    assert done.result == {"steered": {"go": "left"}}
    assert "queue.command.consumed" in receipt_types(job.job_id)


def test_sigterm_drains_the_running_attempt_before_exiting(stack):
    stack.start("driver")
    worker = stack.start("chat", name="chat-drain")
    job = enqueue("test-sleep", sleepMs=1500)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start")
    worker.send_signal(15)
    assert worker.wait(timeout=30) == 0
    done = queue.get(job.job_id)
    assert done.status == "completed", receipt_types(job.job_id)  # drained, not abandoned
    from jobs.models import WorkerProcess

    assert WorkerProcess.objects.get(pid=worker.pid).stopped_at is not None


def test_unknown_process_role_runs_only_the_loops_and_says_so(stack):
    import subprocess
    import sys

    from jobs.models import WorkerProcess
    from tests.runtime.conftest import ROOT

    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runworker"],
        cwd=ROOT,
        env={**stack.env, "RECEIPT_PROCESS_ROLE": "wokrer-chat"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    stack.procs["all"] = proc
    row = wait_for(
        lambda: WorkerProcess.objects.filter(pid=proc.pid).first(),
        message="the fallback process to register",
    )
    assert row.role == "all" and "wokrer-chat" in row.info["warning"]
    job = enqueue("test-echo")
    stack.start("driver")
    wait_for(
        lambda: DeliveryPromise.objects.filter(job_id=job.job_id, function="execute").exists(),
        message="the driver to dispatch",
    )
    assert queue.get(job.job_id).status == "queued"  # nobody serves chat: it stays queued


def test_runworker_rejects_an_unknown_role(stack):
    import subprocess
    import sys

    from tests.runtime.conftest import ROOT

    result = subprocess.run(
        [sys.executable, "manage.py", "runworker", "--role", "chatt"],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "unknown role 'chatt'" in result.stderr
