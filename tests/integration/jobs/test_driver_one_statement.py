"""D-4 on PostgreSQL: the driver's common decision in one statement. An open driver
promise whose job is queued with no abort asked gets the execute promise of the job's
next attempt and is settled without the driver reading either first (one round trip with
its commit); anything else is written by nothing in that statement and is read and
decided as before."""

from __future__ import annotations

import select
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction

from jobs import promise_sql, queue
from jobs.core.contracts import routed_group
from jobs.core.timing import TimingSettings
from jobs.models import DeliveryPromise, Job
from jobs.runtime import driver, promisebroker, promises
from jobs.runtime.dispatch import start_driver
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.jobs.helpers import payload
from tests.support import listening

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

AGENT = "test-one-statement"


def _enqueue(count: int, **options: Any) -> list[Any]:
    jobs = [queue.enqueue(AGENT, payload("factory.run", i=i), **options).job for i in range(count)]
    for job in jobs:
        start_driver(job)  # the enqueue's statement opened it already: nothing more
    return jobs


def _no_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the common case was read before it was decided")

    monkeypatch.setattr(promises, "get_with_jobs", refuse)


def test_queued_jobs_are_dispatched_without_the_drivers_read(monkeypatch):
    jobs = _enqueue(3)
    _no_read(monkeypatch)
    before = wall_clock_ms()

    results = driver.drive_many([job.job_id for job in jobs])

    lease = TimingSettings.from_config(settings.RECEIPT).job_lease_ms
    assert sorted(r["jobId"] for r in results) == sorted(j.job_id for j in jobs)
    for job in jobs:
        execute_id = driver.execute_promise_id(job.job_id, 1, job.job_id)
        assert {"status": "dispatched", "jobId": job.job_id, "execute": execute_id} in results
        execute = DeliveryPromise.objects.get(pk=execute_id)
        assert (execute.function, execute.job_id, execute.attempt, execute.state) == (
            "execute",
            job.job_id,
            1,
            "pending",
        )
        assert execute.target_group == routed_group(job.agent_id, job.kind)
        assert execute.dispatch_key == job.job_id
        assert before + (job.lease_ms or lease) <= execute.timeout_at
        assert execute.timeout_at <= wall_clock_ms() + (job.lease_ms or lease)
        settled = DeliveryPromise.objects.get(pk=job.job_id)
        assert (settled.state, settled.result) == (
            "resolved",
            {"status": "dispatched", "execute": execute_id},
        )
    # a second delivery of the same driver task finds the promise settled: the read path
    monkeypatch.undo()
    again = driver.drive(jobs[0].job_id)
    assert again["status"] == "duplicate_delivery"
    assert DeliveryPromise.objects.filter(function="execute").count() == 3


def test_a_recovery_generation_opens_its_own_execute_promise(monkeypatch):
    (job,) = _enqueue(1)
    promises.settle(job.job_id, "rejected", now_ms=wall_clock_ms(), result={"status": "lost"})
    started = start_driver(job)
    recovery = started.promise_id
    assert started.created and recovery is not None and recovery != job.job_id
    _no_read(monkeypatch)

    (result,) = driver.drive_many([recovery])

    execute_id = driver.execute_promise_id(job.job_id, 1, recovery)
    assert ":dispatch:" in execute_id
    assert result == {"status": "dispatched", "jobId": job.job_id, "execute": execute_id}
    assert DeliveryPromise.objects.get(pk=execute_id).dispatch_key == job.job_id


def _decided(driver_ids: list[str]) -> list[driver.Decided]:
    return driver.drive_queued(
        driver_ids, now_ms=wall_clock_ms(), default_lease_ms=60_000, wake_channel=None
    )


def test_anything_but_a_plainly_queued_job_is_left_to_the_read_and_decide_path():
    aborted, settled, leased = _enqueue(3)
    queue.abort(aborted.job_id, reason="operator")  # a queued job: canceled at once
    promises.settle(settled.job_id, "resolved", now_ms=wall_clock_ms(), result={"status": "x"})
    queue.start_attempt(
        leased.job_id, worker_id="chat:elsewhere:1", attempt=1, now_ms=wall_clock_ms()
    )
    ids = [aborted.job_id, settled.job_id, leased.job_id, "no-such-promise"]

    assert _decided(ids) == []
    assert not DeliveryPromise.objects.filter(function="execute").exists()
    assert DeliveryPromise.objects.get(pk=aborted.job_id).settled_at is None
    assert DeliveryPromise.objects.get(pk=leased.job_id).settled_at is None

    by_job = {r.get("jobId", r.get("promiseId")): r["status"] for r in driver.drive_many(ids)}
    assert by_job == {
        aborted.job_id: "terminal_state",
        settled.job_id: "duplicate_delivery",
        leased.job_id: "already_running",
        "no-such-promise": "unknown_promise",
    }
    assert queue.get(aborted.job_id).status == "canceled"
    assert queue.get(leased.job_id).status == "running"  # its first heartbeat came with the lease


def test_a_queued_fold_with_an_abort_asked_is_left_to_the_read_and_decide_path():
    # The fold is `json` text: the statement reads the flag as the key's text. Written
    # through the ORM here (a queued job with an abort asked is otherwise a moment's state).
    asked, plain = _enqueue(2)
    row = Job.objects.get(pk=asked.job_id)
    Job.objects.filter(pk=asked.job_id).update(state={**row.state, "abortRequested": True})
    assert Job.objects.get(pk=asked.job_id).state["abortRequested"] is True

    decided = _decided([asked.job_id, plain.job_id])

    assert [d.job_id for d in decided] == [plain.job_id]
    assert DeliveryPromise.objects.get(pk=asked.job_id).settled_at is None


@pytest.mark.django_db(transaction=True)
def test_the_database_broker_is_woken_by_the_statement_itself():
    """With the database broker the worker cluster given work is notified in the
    statement's own transaction: it hears of the promise when it commits."""
    assert settings.Q_CLUSTER.get("orm")
    (job,) = _enqueue(1)
    cluster = f"worker-{routed_group(job.agent_id, job.kind)}"
    with listening(f'"{promisebroker.channel_for(cluster)}"') as listener:
        (result,) = driver.drive_many([job.job_id])
        assert result["status"] == "dispatched"
        assert not connection.in_atomic_block
        heard: set[str] = set()
        deadline = wall_clock_ms() + 5_000
        while cluster not in heard and wall_clock_ms() < deadline:
            select.select([listener.fileno()], [], [], 0.5)
            heard |= {n.payload for n in listener.notifies(timeout=0, stop_after=0)}
        assert cluster in heard


def test_a_take_is_a_heap_only_update():
    """The broker's take pushes `available_at`, which no index holds: the row's new version
    stays on its page and adds no index entry (the table leaves half of each page for it)."""
    jobs = _enqueue(3)
    # this backend's counts not yet reported (they may include earlier transactions')
    counts = (
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
        "WHERE relname = 'jobs_delivery_promise'"
    )
    with connection.cursor() as cursor:
        cursor.execute(counts)
        updated_before, hot_before = cursor.fetchone()
        cursor.execute(
            promise_sql.TAKE_PG,
            [wall_clock_ms() + promisebroker.VISIBILITY_MS, "driver", wall_clock_ms(), 10],
        )
        taken = {row[0] for row in cursor.fetchall()}
        cursor.execute(counts)
        updated, hot = cursor.fetchone()
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'jobs_delivery_promise'")
        (options,) = cursor.fetchone()
    assert taken == {job.job_id for job in jobs}
    assert (updated - updated_before, hot - hot_before) == (3, 3)
    assert "fillfactor=50" in options


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_pass_is_its_own_transaction_and_only_its_commit_skips_the_disk_wait():
    """The pass's statement runs alone (autocommit: nothing left open) and turns off the
    wait for the disk for its own transaction only (SET LOCAL): the next transaction on
    the connection, a worker's begin or settlement that writes receipts, commits durably."""
    jobs = _enqueue(2)
    assert _synchronous_commit() == "on"

    results = driver.drive_many([job.job_id for job in jobs])

    assert {r["status"] for r in results} == {"dispatched"}
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert _synchronous_commit() == "on"
    # inside a caller's transaction the setting is that transaction's, and ends with it
    more = _enqueue(1)
    with transaction.atomic():
        assert len(_decided([more[0].job_id])) == 1
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"
