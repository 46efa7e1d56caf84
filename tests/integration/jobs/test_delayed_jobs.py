"""Delayed jobs (issue 33 item 3, G-3) below the runtime: a delayed job's driver promise is
opened scheduled, out of every take's reach, and the due loop releases it when its time
comes, once, into the driver's queue; recovery leaves it alone meanwhile. The worker
processes' side is tests/runtime/test_scheduled.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from django.db import connection
from django_q.signing import SignedPackage

from jobs import promise_sql as sql
from jobs import queue, redrive
from jobs.models import DeliveryPromise
from jobs.runtime import dispatch, due, recovery, transport
from receipts.clock import now_ms as wall_clock_ms
from receipts.db import prepared
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload

pytestmark = pytest.mark.django_db

AGENT = "test-delayed"
MINUTE_MS = 60_000


def enqueue(**options: Any):
    """One job, with its delivery opened as the enqueue's after-commit pass opens it where
    the enqueue's own statement did not (SQLite)."""
    result = queue.enqueue(AGENT, payload("factory.run"), **options)
    if not result.dispatched:
        dispatch.dispatch_batch([result.job])
    return result.job


def deliverable(group: str, now: int) -> list[str]:
    """What the database broker's take would take for `group` at `now` (its own filter)."""
    return [row[0] for row in prepared(sql.PEEK, [group, now, 10_000])[0]]


def test_a_delayed_job_waits_out_of_every_take_until_the_due_loop_releases_it_once():
    now = wall_clock_ms()
    job = enqueue(run_at=now + MINUTE_MS, priority=5)
    assert (job.run_at, job.priority, job.status) == (now + MINUTE_MS, 5, "queued")
    promise = DeliveryPromise.objects.get(pk=job.job_id)
    assert (promise.function, promise.due_at) == ("driver", now + MINUTE_MS)
    assert promise.timeout_at > now + MINUTE_MS  # it cannot time out before its time
    assert job.job_id not in deliverable("driver", now + MINUTE_MS)  # scheduled: no take sees it

    assert due.release_due(now_ms=now + MINUTE_MS - 1).acted == 0
    assert job.job_id not in deliverable("driver", now + MINUTE_MS)

    report = due.release_due(now_ms=now + MINUTE_MS)
    assert (report.acted, report.examined) == (1, 1)
    assert deliverable("driver", now + MINUTE_MS) == [job.job_id]
    assert due.release_due(now_ms=now + MINUTE_MS).acted == 0  # released once
    assert_read_model_matches_receipts(job.job_id)


def test_a_run_at_in_the_past_means_now_and_changes_nothing_of_a_plain_job():
    now = wall_clock_ms()
    job = enqueue(run_at=now - 5_000)
    assert job.run_at is None
    assert DeliveryPromise.objects.get(pk=job.job_id).due_at is None
    assert job.job_id in deliverable("driver", wall_clock_ms())


def test_the_due_loop_releases_earliest_first_in_bounded_batches():
    now = wall_clock_ms()
    jobs = [enqueue(run_at=now + MINUTE_MS + i) for i in (3, 1, 2)]
    later = enqueue(run_at=now + 10 * MINUTE_MS)
    report = due.release_due(now_ms=now + 2 * MINUTE_MS, limit=2)
    assert report.acted == 2
    assert set(deliverable("driver", now + 2 * MINUTE_MS)) == {jobs[1].job_id, jobs[2].job_id}
    assert due.release_due(now_ms=now + 2 * MINUTE_MS).acted == 1
    assert later.job_id not in deliverable("driver", now + 2 * MINUTE_MS)


def test_recovery_leaves_a_delayed_job_alone_and_reopens_a_lost_delivery_scheduled():
    now = wall_clock_ms()
    job = enqueue(run_at=now + 10 * MINUTE_MS)
    redriven = recovery.redrive_queued(now_ms=now + MINUTE_MS, min_age_ms=0, cooldown_ms=0)
    assert redriven.acted == 0  # its scheduled delivery is pending: nothing to redrive
    DeliveryPromise.objects.filter(job_id=job.job_id).delete()  # lost (a restore, a bug)
    assert recovery.redrive_queued(now_ms=now + MINUTE_MS, min_age_ms=0, cooldown_ms=0).acted == 1
    reopened = DeliveryPromise.objects.get(job_id=job.job_id)
    assert reopened.due_at == now + 10 * MINUTE_MS
    assert deliverable("driver", now + 9 * MINUTE_MS) == []


def test_an_operators_redrive_of_a_delayed_job_does_not_start_it_early():
    now = wall_clock_ms()
    job = enqueue(run_at=now + 10 * MINUTE_MS)
    started = redrive.redrive_now(job.job_id, by="ops", now_ms=now).started
    assert started.created
    assert DeliveryPromise.objects.get(pk=started.promise_id).due_at == now + 10 * MINUTE_MS
    assert deliverable("driver", now + MINUTE_MS) == []


def test_a_batch_opens_plain_delayed_and_prioritized_deliveries_each_as_asked():
    now = wall_clock_ms()
    results = queue.enqueue_many(
        [
            queue.build_request(AGENT, payload("factory.run", i=0)),
            queue.build_request(AGENT, payload("factory.run", i=1), run_at=now + MINUTE_MS),
            queue.build_request(AGENT, payload("factory.run", i=2), priority=100),
        ]
    )
    dispatch.dispatch_batch([r.job for r in results if not r.dispatched])
    ids = [r.job.job_id for r in results]
    rows = {p.id: p for p in DeliveryPromise.objects.filter(pk__in=ids)}
    assert [rows[i].due_at for i in ids] == [None, now + MINUTE_MS, None]
    taken = deliverable("driver", wall_clock_ms())
    assert taken == [ids[2], ids[0]]  # the priority-100 one first; the delayed one not at all


class _Redis:
    """One Redis list of the driver cluster: what is pushed to it."""

    list_key = "driver"

    def __init__(self) -> None:
        self.pushed: list[str] = []
        self.connection = self

    def rpush(self, key: str, *packages: str) -> int:
        self.pushed += packages
        return len(self.pushed)


def _pushed_ids(redis: _Redis) -> list[str]:
    return [SignedPackage.loads(package)["args"][0] for package in redis.pushed]


def test_with_redis_a_delayed_job_is_pushed_when_released_not_when_enqueued(
    monkeypatch, settings, django_capture_on_commit_callbacks
):
    redis = _Redis()
    cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k not in ("orm", "broker_class")}
    settings.Q_CLUSTER = {**cluster, "redis": "redis://unused"}
    settings.RECEIPT = dataclasses.replace(settings.RECEIPT, dispatch_mode="inline")
    monkeypatch.setattr(transport, "_broker", lambda cluster: redis)
    now = wall_clock_ms()
    with django_capture_on_commit_callbacks(execute=True):  # and the dispatch they start
        delayed, plain = (
            result.job
            for result in queue.enqueue_many(
                [
                    queue.build_request(AGENT, payload("factory.run"), run_at=now + MINUTE_MS),
                    queue.build_request(AGENT, payload("factory.run")),
                ]
            )
        )
    assert _pushed_ids(redis) == [plain.job_id]
    with django_capture_on_commit_callbacks(execute=True):
        assert due.release_due(now_ms=now + MINUTE_MS).acted == 1
    assert _pushed_ids(redis) == [plain.job_id, delayed.job_id]


def _plan(statement: str, params: list[Any]) -> str:
    """The plan each database would run `statement` with, as text."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            numbered = statement
            for index in range(1, len(params) + 1):
                numbered = numbered.replace("%s", f"${index}", 1)
            cursor.execute(f"PREPARE probe AS {numbered}")
            try:
                marks = ", ".join(["%s"] * len(params))
                cursor.execute(f"EXPLAIN EXECUTE probe({marks})", params)
                return "\n".join(row[0] for row in cursor.fetchall())
            finally:
                cursor.execute("DEALLOCATE probe")
        cursor.execute(f"EXPLAIN QUERY PLAN {statement}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


SCHEDULED = 100_000


def test_100000_delayed_jobs_are_found_by_due_time_and_never_read_by_a_take():
    """G-3: the due loop's lookup reads the scheduled index from its first entry (a range
    on due time), and a take reads the deliverable index, which holds none of them: not a
    scan of the table in either, whatever the planner knows of it (a generic plan)."""
    now = wall_clock_ms()
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) "
            f"INSERT INTO {sql.TABLE} ({', '.join(sql.COLUMNS)}) "
            "SELECT 'later-' || i, 'driver', 'later-' || i, NULL, 'driver', 'later-' || i, "
            "'pending', %s + i + 600000, %s, %s, %s + i, %s + i FROM n",
            [SCHEDULED, now, now, now, now + MINUTE_MS, now + MINUTE_MS],
        )
    plain = enqueue()
    assert deliverable("driver", now + 1) in ([], [plain.job_id])  # none of the 100,000
    assert due.release_due(now_ms=now).acted == 0

    if connection.vendor == "postgresql":
        release = _plan(sql.RELEASE_DUE_PG, [now, due.BATCH])
        take = _plan(sql.TAKE_PG, [now + 30_000, "driver", now, 50])
        assert "promise_scheduled" in release, release
        assert "promise_deliverable" in take, take
    else:
        release = _plan(sql.DUE_SQLITE, [now, due.BATCH])
        take = _plan(sql.PEEK, ["driver", now, 50])
        assert "USING INDEX promise_scheduled" in release, release
        assert "USING INDEX promise_deliverable" in take, take
    for plan in (release, take):
        assert "Seq Scan" not in plan and f"SCAN {sql.TABLE}" not in plan, plan
