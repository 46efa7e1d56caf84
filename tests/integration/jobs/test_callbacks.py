"""D-8 on a real database and a real HTTP receiver: every settlement and dispatch records
its callback in the same transaction; the sender posts the exact body with the bearer
token, retries after a failure or a process death, and gives up at the deadline."""

from __future__ import annotations

import dataclasses

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import dashboard, metrics, queue
from jobs.core.state import Fence
from jobs.models import Callback
from jobs.runtime import callbacks, dispatch, driver, recovery, worker
from receipts import store
from tests.conftest import wait_for
from tests.integration.api.conftest import api, issue  # noqa: F401
from tests.integration.jobs.callback_receiver import Receiver
from tests.integration.jobs.helpers import payload
from tests.support import present

pytestmark = pytest.mark.django_db
T = 1_800_000_000_000
TOKEN = "cb-token-123"


@pytest.fixture
def receiver():
    running = Receiver().start()
    yield running
    running.stop()


def configure(settings, url: str | None, **extra) -> None:
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT,
        resonate_callback_url=None,
        event_callback_url=url,
        callback_token=TOKEN,
        **extra,
    )


@pytest.fixture
def hooked(settings, receiver) -> Receiver:
    configure(settings, receiver.url)
    return receiver


def enqueue(job_id: str, *, now_ms: int = T, **options) -> str:
    return queue.enqueue("factory", payload(), job_id=job_id, now_ms=now_ms, **options).job.job_id


def leased(job_id: str, *, worker_id: str = "w:1", now_ms: int = T + 10) -> Fence:
    written = queue.lease(job_id, worker_id=worker_id, now_ms=now_ms)
    assert written.applied
    return Fence(worker_id, written.job.attempt)


def recorded(job_id: str) -> list[tuple[str, str]]:
    return list(Callback.objects.filter(job_id=job_id).order_by("id").values_list("event", "state"))


def expected(event: str, job_id: str, status: str, attempt: int, at: int) -> dict:
    return {
        "event": event,
        "jobId": job_id,
        "stream": f"jobs/{job_id}",
        "status": status,
        "attempt": attempt,
        "agentId": "factory",
        "kind": "factory.run",
        "at": at,
    }


# ---- the body and the headers --------------------------------------------------------------


def test_each_event_posts_its_exact_body_with_the_bearer_token(hooked):
    """D-8: dispatched, completed, failed and canceled each POST exactly
    {event, jobId, stream, status, attempt, agentId, kind, at}, as JSON, with
    `Authorization: Bearer $RECEIPT_CALLBACK_TOKEN`."""
    started = dispatch.start_driver(present(queue.get(enqueue("cb-dispatched"))), now_ms=T + 1)
    assert driver.drive(present(started.promise_id), now_ms=T + 2)["status"] == "dispatched"
    assert hooked.posts == []  # the driver only records: the sender posts
    queue.complete(enqueue("cb-completed"), {"ok": 1}, fence=leased("cb-completed"), now_ms=T + 11)
    queue.fail(
        enqueue("cb-failed", max_attempts=1), "boom", fence=leased("cb-failed"), now_ms=T + 12
    )
    queue.command(enqueue("cb-canceled"), "abort", reason="stop", now_ms=T + 13)
    report = callbacks.deliver_due(now_ms=T + 100)
    assert (report.examined, report.acted, report.errors) == (4, 4, [])
    assert hooked.bodies() == {
        ("cb-dispatched", "dispatched"): expected(
            "dispatched", "cb-dispatched", "queued", 0, T + 2
        ),
        ("cb-completed", "completed"): expected(
            "completed", "cb-completed", "completed", 1, T + 11
        ),
        ("cb-failed", "failed"): expected("failed", "cb-failed", "failed", 1, T + 12),
        ("cb-canceled", "canceled"): expected("canceled", "cb-canceled", "canceled", 0, T + 13),
    }
    ids = dict(Callback.objects.values_list("job_id", "id"))
    for post in hooked.posts:
        assert post.path == "/hooks/receipt"
        assert post.headers["Content-Type"] == "application/json"
        assert post.headers["Authorization"] == f"Bearer {TOKEN}"
        assert post.headers["X-Receipt-Callback-Id"] == str(ids[post.body["jobId"]])
    assert set(Callback.objects.values_list("state", "attempts", "last_status")) == {
        ("delivered", 1, 200)
    }


def test_a_batch_driver_pass_records_each_dispatch(hooked):
    """D-8, D-4: the driver's batch path records `dispatched` with the execute promises
    it opens in one transaction."""
    ids = [enqueue(f"cb-batch-{n}") for n in range(3)]
    promise_ids = [
        present(dispatch.start_driver(present(queue.get(job_id)), now_ms=T + 1).promise_id)
        for job_id in ids
    ]
    results = driver.drive_many(promise_ids, now_ms=T + 2)
    assert [r["status"] for r in results] == ["dispatched"] * 3
    assert callbacks.deliver_due(now_ms=T + 3).acted == 3
    assert hooked.bodies() == {
        (job_id, "dispatched"): expected("dispatched", job_id, "queued", 0, T + 2) for job_id in ids
    }
    assert driver.drive_many(promise_ids, now_ms=T + 3)  # duplicates dispatch nothing new
    assert Callback.objects.count() == 3


def test_without_a_token_no_authorization_header_is_sent(settings, receiver):
    configure(settings, receiver.url)
    settings.RECEIPT = dataclasses.replace(settings.RECEIPT, callback_token=None)
    queue.command(enqueue("cb-bare"), "abort", now_ms=T + 1)
    callbacks.deliver_due(now_ms=T + 2)
    [post] = receiver.posts
    assert "Authorization" not in post.headers


def test_a_worker_settlement_records_its_callback_and_posts_nothing_itself(hooked):
    """D-8, D-5: no attempt waits on a receiver: the worker only records (here a job
    whose agent has no handler is failed by `begin`); the sender's pump posts it."""
    job_id = queue.enqueue("nobody-cb", payload(), job_id="cb-worker", now_ms=T).job.job_id
    started = dispatch.start_driver(present(queue.get(job_id)), now_ms=T + 1)
    execute_id = driver.drive(present(started.promise_id), now_ms=T + 2)["execute"]
    assert worker.execute(execute_id)["status"] == "failed"
    assert hooked.posts == []
    assert recorded(job_id) == [("dispatched", "pending"), ("failed", "pending")]
    sender = callbacks.Sender()
    callbacks.pump(now_ms=T + 3, sender=sender)
    delivered = [("dispatched", "delivered"), ("failed", "delivered")]
    wait_for(  # each pass writes the answers the sender has so far
        lambda: callbacks.pump(now_ms=T + 4, sender=sender) and recorded(job_id) == delivered,
        message="both callbacks delivered",
    )
    bodies = hooked.bodies()
    failed = bodies[(job_id, "failed")]
    assert failed == {
        **expected("failed", job_id, "failed", 1, failed["at"]),
        "agentId": "nobody-cb",
    }
    assert (job_id, "dispatched") in bodies
    assert recorded(job_id) == [("dispatched", "delivered"), ("failed", "delivered")]


# ---- every path records ----------------------------------------------------------------------


def test_an_api_abort_of_a_queued_job_records_canceled(hooked, api):  # noqa: F811
    """D-8, A-5: the API's cancel records the callback with the cancel."""
    job_id = enqueue("cb-api")
    status, _ = api.post(f"/jobs/{job_id}/abort", {"reason": "no longer needed"})
    assert status == 202
    assert recorded(job_id) == [("canceled", "pending")]


def test_an_admin_abort_of_a_queued_job_records_canceled(hooked, admin_client):
    """D-8, U-3: the admin's abort action."""
    from tests.integration.admin.conftest import job_url

    job_id = enqueue("cb-admin")
    admin_client.post(job_url(job_id), {"action": "abort", "reason": "operator"})
    assert queue.get(job_id).status == "canceled"
    assert recorded(job_id) == [("canceled", "pending")]


def test_a_cli_abort_of_a_queued_job_records_canceled(hooked):
    """D-8, P-4: `manage.py jobs abort`."""
    job_id = enqueue("cb-cli")
    call_command("jobs", "abort", job_id, "--json")
    assert recorded(job_id) == [("canceled", "pending")]


def test_a_singleton_cancel_records_canceled_for_the_job_it_replaces(hooked):
    """D-8, J-8: a `cancel` enqueue cancels the queued job on its session key."""
    old = enqueue("cb-single-1", session_key="s-cb", singleton_mode="cancel")
    enqueue("cb-single-2", session_key="s-cb", singleton_mode="cancel", now_ms=T + 5)
    assert queue.get(old).status == "canceled"
    assert recorded(old) == [("canceled", "pending")]
    assert recorded("cb-single-2") == []


def test_a_worker_honouring_an_abort_records_canceled(hooked):
    """D-8, J-10: the fenced cancel of a running job."""
    job_id = enqueue("cb-honour")
    fence = leased(job_id)
    queue.command(job_id, "abort", reason="stop", now_ms=T + 20)
    assert recorded(job_id) == []  # an abort request settles nothing yet
    queue.cancel(job_id, reason="stop", fence=fence, now_ms=T + 21)
    assert recorded(job_id) == [("canceled", "pending")]


def test_the_driver_canceling_an_abort_requested_job_records_canceled(hooked):
    """D-8, D-4: a requeued job with an abort pending is canceled by the driver, which
    records the callback with the cancel."""
    job_id = enqueue("cb-driver-cancel", max_attempts=2)
    leased(job_id)
    queue.command(job_id, "abort", reason="stop", now_ms=T + 20)
    queue.expire_lease(job_id, now_ms=T + 10**9)  # requeued with the abort still pending
    started = dispatch.start_driver(
        present(queue.get(job_id)), dispatch_key="k-1", now_ms=T + 10**9
    )
    assert driver.drive(present(started.promise_id), now_ms=T + 10**9 + 1)["status"] == "canceled"
    assert recorded(job_id) == [("canceled", "pending")]
    callbacks.deliver_due(now_ms=T + 10**9 + 2)
    assert recorded(job_id) == [("canceled", "delivered")]
    assert hooked.bodies()[(job_id, "canceled")]["status"] == "canceled"


def test_a_lease_expiry_that_uses_up_the_attempts_records_failed(hooked):
    """D-8, J-4, L-2: the first expiry requeues (nothing to post), the last fails the job."""
    job_id = enqueue("cb-expiry", max_attempts=2)
    leased(job_id, now_ms=T + 10)
    later = T + 10**8
    assert recovery.expire_leases(now_ms=later).acted == 1
    assert queue.get(job_id).status == "queued" and recorded(job_id) == []
    leased(job_id, worker_id="w:2", now_ms=later + 1)
    assert recovery.expire_leases(now_ms=later + 10**8).acted == 1
    assert queue.get(job_id).status == "failed"
    assert recorded(job_id) == [("failed", "pending")]
    callbacks.deliver_due(now_ms=later + 10**8)
    assert hooked.bodies()[(job_id, "failed")] == expected(
        "failed", job_id, "failed", 2, later + 10**8
    )


def test_releasing_a_gone_holder_that_uses_up_the_attempts_records_failed(hooked):
    """D-8, D-11: the lease of a dead process, released early, on the last attempt."""
    job_id = enqueue("cb-release", max_attempts=1)
    fence = leased(job_id)
    recovery.release_holder(job_id, fence, now_ms=T + 50, reason="gone")
    assert recorded(job_id) == [("failed", "pending")]


def test_replaying_a_job_posts_nothing_again(hooked):
    """D-8, S-8: a rebuild of the read model records no callback."""
    job_id = enqueue("cb-replay")
    queue.command(job_id, "abort", now_ms=T + 1)
    store.replay(f"jobs/{job_id}")
    assert recorded(job_id) == [("canceled", "pending")]


def test_without_a_url_nothing_is_recorded_and_no_statement_is_spent(settings):
    """D-8: the hot path pays nothing when no callback URL is configured."""
    configure(settings, None)
    job_id = enqueue("cb-none")
    fence = leased(job_id)
    with CaptureQueriesContext(connection) as queries:
        queue.complete(job_id, None, fence=fence, now_ms=T + 20)
    assert not any("jobs_callback" in q["sql"] for q in queries.captured_queries)
    assert Callback.objects.count() == 0


# ---- retries ---------------------------------------------------------------------------------


def test_a_receiver_down_for_ten_seconds_gets_the_callback_when_it_comes_back(settings):
    """D-8: the receiver refuses connections for 10 s; the tries back off (1 s, 2 s,
    4 s, 8 s) and the first one after it is back delivers, once."""
    receiver = Receiver()  # nothing listens on its port yet: connections are refused
    configure(settings, receiver.url)
    job_id = enqueue("cb-down")
    queue.complete(job_id, None, fence=leased(job_id), now_ms=T)
    callbacks.deliver_due(now_ms=T)  # the first try fails
    row = Callback.objects.get(job_id=job_id)
    assert (row.state, row.attempts, row.last_status, row.next_at) == ("pending", 1, None, T + 1000)
    assert row.last_error
    try:
        for now in range(T + 500, T + 20_001, 500):  # the loop, ticking every 500 ms
            if now == T + 10_000:
                receiver.start()
            callbacks.deliver_due(now_ms=now)
    finally:
        receiver.stop()
    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_status, row.last_error) == ("delivered", 5, 200, None)
    assert (row.finished_at, row.next_at) == (T + 15_000, None)  # tries at 0, 1, 3, 7, 15 s
    assert [p.body for p in receiver.posts] == [expected("completed", job_id, "completed", 1, T)]


def test_a_process_that_dies_mid_post_leaves_the_callback_to_the_loop(hooked):
    """D-8: a claim that never wrote its outcome (the process died) is due again after
    the claim window, and the loop delivers it."""
    job_id = enqueue("cb-died")
    queue.command(job_id, "abort", now_ms=T)
    assert [c.job_id for c in callbacks._claim(T, 16)] == [job_id]  # claimed, then died
    assert callbacks.deliver_due(now_ms=T + 1000).examined == 0  # still someone else's
    assert callbacks.deliver_due(now_ms=T + callbacks.CLAIM_MS).acted == 1
    row = Callback.objects.get(job_id=job_id)
    assert (row.state, row.attempts) == ("delivered", 2)
    assert len(hooked.posts) == 1


def test_a_callback_still_failing_at_its_deadline_is_given_up_and_counted(settings, hooked):
    """D-8: a failure never fails the job; past RECEIPT_CALLBACK_RETRY_FOR_MS the callback
    is given up, and /metrics and the dashboard count it from the records."""
    configure(settings, hooked.url, callback_retry_for_ms=10_000)
    hooked.status = 503
    job_id = enqueue("cb-503")
    queue.complete(job_id, None, fence=leased(job_id), now_ms=T)
    for now in range(T, T + 20_001, 1000):
        callbacks.deliver_due(now_ms=now)
    row = Callback.objects.get(job_id=job_id)
    assert (row.state, row.attempts, row.last_status) == ("gave_up", 5, 503)
    assert row.last_error.startswith("HTTP 503")
    assert (row.finished_at, row.next_at) == (T + 10_000, None)  # the last try on the deadline
    assert len(hooked.posts) == 5 and queue.get(job_id).status == "completed"
    pending = enqueue("cb-pending")
    queue.command(pending, "abort", now_ms=T + 10_000)
    counts = dashboard.snapshot(now_ms=T + 10_000)["callbacks"]["records"]
    assert (counts["pending"], counts["deliveredLastHour"], counts["gaveUpLastHour"]) == (1, 0, 1)
    assert counts["byEvent"]["completed"]["gaveUpLastHour"] == 1
    assert counts["byEvent"]["canceled"]["pending"] == 1
    text = metrics.render(T + 10_000)
    assert 'receipt_callbacks_finished_last_hour{event="completed",state="gave_up"} 1' in text
    assert 'receipt_callbacks_pending{event="canceled"} 1' in text
    assert 'receipt_callbacks_pending{event="completed"} 0' in text


def test_settled_callbacks_are_pruned_after_the_retention(hooked):
    """D-8: delivered and given-up rows are deleted after a week; pending ones never."""
    queue.command(enqueue("cb-old"), "abort", now_ms=T)
    callbacks.deliver_due(now_ms=T)
    queue.command(enqueue("cb-waiting"), "abort", now_ms=T)
    assert callbacks.prune(now_ms=T + callbacks.KEEP_MS).acted == 0
    assert callbacks.prune(now_ms=T + callbacks.KEEP_MS + 1).acted == 1
    assert list(Callback.objects.values_list("job_id", flat=True)) == ["cb-waiting"]
