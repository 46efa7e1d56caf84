"""Priorities (issue 33 item 4, G-4) through the database broker's takes, both hops: the
driver takes its promises in take order and opens each execute promise in its job's
priority's place; a worker cluster takes those the same way. Driven here by the real
broker's take (on the test's connection) and the real driver pass, without worker
processes: the order of the takes is the order attempts start in."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from jobs import queue
from jobs.runtime import dispatch, driver, promises
from jobs.runtime.promisebroker import DRIVER_BATCH, PromiseBroker
from receipts.db import prepared
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db

AGENT = "test-priorities"  # routed to the chat group


def broker(cluster: str, limit: int) -> PromiseBroker:
    """The cluster's broker taking `limit` promises at a time; on PostgreSQL it sends its
    statements on the test's connection instead of its own, which cannot see this test's
    transaction."""
    taker = PromiseBroker(list_key=cluster)
    taker._limit = lambda: limit  # type: ignore[method-assign]
    if connection.vendor == "postgresql":
        taker._select = lambda sql, params: list(prepared(sql, params)[0])  # type: ignore[method-assign]
    return taker


def enqueue_many(count: int, **options: Any) -> list[str]:
    """`count` jobs with their driver promises opened, as the enqueue (PostgreSQL) or its
    after-commit pass (SQLite) opens them."""
    ids: list[str] = []
    for start in range(0, count, 1000):
        results = queue.enqueue_many(
            [
                queue.build_request(AGENT, payload("factory.run", i=i), **options)
                for i in range(start, min(count, start + 1000))
            ]
        )
        dispatch.dispatch_batch([r.job for r in results if not r.dispatched])
        ids += [r.job.job_id for r in results]
    return ids


BACKLOG = 10_000


def test_a_priority_100_job_behind_10000_queued_jobs_starts_before_9900_of_them():
    backlog = set(enqueue_many(BACKLOG))
    (urgent,) = enqueue_many(1, priority=100)
    drivers, workers = broker("driver", DRIVER_BATCH), broker("worker-chat", 4)
    started: list[str] = []
    while urgent not in started and len(started) < BACKLOG:
        # a driver pass over one take, then a take of the chat cluster: attempts start
        driver.drive_many([row[0] for row in drivers._take()])
        started += [row[1] for row in workers._take()]
    assert urgent in started
    ahead = started.index(urgent)
    assert set(started[:ahead]) <= backlog
    assert ahead <= BACKLOG - 9_900, f"{ahead} priority-0 jobs started before it"


def test_a_low_priority_job_is_taken_within_a_bounded_number_of_takes_while_higher_ones_keep_coming(
    monkeypatch,
):
    """The starvation guard (docs/decisions.md, "Priorities age"): a delivery of priority
    -100 is passed by priority-100 ones only while they arrive within 200 points of aging
    of it; here a point is a second and four arrive and four are taken every 10 s."""
    aging, every, per_take = 1_000, 10_000, 4
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, priority_aging_ms=aging)
    )
    start = 1_000_000  # long past: every promise is deliverable at once, ordered as created

    def arrive(at: int, priority: int, count: int) -> list[str]:
        new = [
            promises.NewPromise(
                f"p{priority}-{at}-{i}",
                "execute",
                f"job-{priority}-{at}-{i}",
                1,
                "chat",
                f"job-{priority}-{at}-{i}",
                60_000,
                priority,
            )
            for i in range(count)
        ]
        promises.create_many(new, now_ms=at)
        return [p.promise_id for p in new]

    (low,) = arrive(start, -100, 1)
    workers = broker("worker-chat", per_take)
    bound = (100 - -100) * aging // every + 1  # takes until arrivals stand behind it
    for take in range(bound + 1):
        arrive(start + take * every, 100, per_take)
        taken = [row[0] for row in workers._take()]
        assert len(taken) == per_take
        if low in taken:
            break
        assert take < bound, f"priority -100 still waiting after {take + 1} takes"
    assert take >= bound - 2, f"taken after {take + 1} takes: priority made no difference"
