"""D-8 with real transactions and threads: replicas of the retry loop never post one
callback twice, and an objective's cancel records the callbacks of the jobs it stops."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings

from jobs import queue
from jobs.models import Callback
from jobs.runtime import callbacks
from objectives import services
from objectives.core import vocabulary as v
from tests.conftest import run_in_threads
from tests.integration.jobs.callback_receiver import Receiver
from tests.integration.jobs.helpers import payload
from tests.integration.objectives.conftest import create, factory, queued, work  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
T = 1_800_000_000_000


@pytest.fixture
def hooked(monkeypatch):
    receiver = Receiver().start()
    monkeypatch.setattr(
        settings,
        "RECEIPT",
        dataclasses.replace(
            settings.RECEIPT, resonate_callback_url=None, event_callback_url=receiver.url
        ),
    )
    yield receiver
    receiver.stop()


def test_concurrent_loop_passes_post_each_callback_once(hooked):
    """D-8: claims skip rows another process holds (FOR UPDATE SKIP LOCKED on
    PostgreSQL, a conditional UPDATE on SQLite): four passes at once, one post per row."""
    for i in range(40):
        job_id = queue.enqueue("factory", payload(), job_id=f"cb-race-{i}", now_ms=T).job.job_id
        queue.command(job_id, "abort", now_ms=T + 1)
    reports = run_in_threads(4, lambda i: callbacks.deliver_due(now_ms=T + 2))
    assert sum(r.acted for r in reports) == 40
    assert sorted(p.body["jobId"] for p in hooked.posts) == sorted(
        f"cb-race-{i}" for i in range(40)
    )
    assert set(Callback.objects.values_list("state", "attempts")) == {("delivered", 1)}


def test_an_objective_cancel_records_canceled_for_the_jobs_it_stops(factory, hooked):  # noqa: F811
    """D-8, O-11: the objective's cancel aborts its queued task job; that cancel records
    the callback with it."""
    oid = create(title="Callbacks", tasks=[{"id": "t", "title": "T", "command": "true"}])
    work(queued()[0])  # the control pass dispatches task t
    job_id = v.task_job_id(oid, "t", 1)
    assert queue.get(job_id).status == "queued"
    services.cancel(oid, by="op")
    assert queue.get(job_id).status == "canceled"
    assert list(Callback.objects.filter(job_id=job_id).values_list("event", "state")) == [
        ("canceled", "pending")
    ]
    callbacks.deliver_due(now_ms=queue.get(job_id).updated_at)
    assert hooked.bodies()[(job_id, "canceled")]["status"] == "canceled"
