"""Issue 34 item 3 with real runworkers: a job that used up its attempts is retried
through the API, runs again under the next attempt number and completes; its callbacks
are posted for both cycles."""

from __future__ import annotations

import dataclasses
import json

import pytest
from django.test import Client

from access.models import ApiToken
from jobs import queue
from jobs.models import Callback
from receipts import store
from tests.conftest import wait_for
from tests.integration.jobs.callback_receiver import Receiver
from tests.runtime.helpers import enqueue, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def receiver():
    running = Receiver().start()
    yield running
    running.stop()


def test_a_failed_job_retried_through_the_api_runs_again_and_completes(stack, receiver, settings):
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT, resonate_callback_url=None, event_callback_url=receiver.url
    )
    stack.env["RECEIPT_EVENT_CALLBACK_URL"] = receiver.url
    stack.start("driver")
    stack.start("chat")
    job_id = enqueue("test-flaky", failThrough=1, max_attempts=1).job_id
    failed = wait_status(job_id, "failed", "completed")
    assert (failed.status, failed.attempt) == ("failed", 1)
    assert failed.last_error == "flaky failure on attempt 1"

    _, token = ApiToken.issue(name="ops", organization_id=None, scopes=["jobs:control"])
    response = Client().post(
        f"/jobs/{job_id}/retry",
        json.dumps({"reason": "flaky provider"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 202, response.content

    done = wait_status(job_id, "completed", timeout=60)
    assert (done.attempt, done.retries, done.result) == (2, 1, {"attempt": 2})
    assert [m["attempt"] for m in stack.marks("start", job_id)] == [1, 2]  # ran once each
    types = [r.type for r in store.read(f"jobs/{job_id}")]
    assert types.count("job.retried") == 1
    assert (types.count("job.failed"), types.count("job.completed")) == (1, 1)
    wait_for(
        lambda: Callback.objects.filter(job_id=job_id, state="delivered").count() == 4,
        timeout=30,
        message="both cycles' callbacks delivered",
    )
    posted = sorted(  # delivered at least once: a set of what arrived
        {
            (p.body["event"], p.body["attempt"], p.body.get("retries"))
            for p in receiver.posts
            if p.body["jobId"] == job_id
        }
    )
    assert posted == [
        ("completed", 2, 1),
        ("dispatched", 0, None),
        ("dispatched", 1, 1),
        ("failed", 1, None),
    ]
    assert queue.get(job_id).status == "completed"
