"""Issue 34 item 3: retrying failed jobs through the queue and the `jobs.retry` service.

A retry is a `job.retried` receipt with `by` on the job's own stream, with a fresh budget
of attempts whose numbers keep rising, and a driver delivery under the retry's own key
committed with it; the job's next settlement records its callback again. Many jobs are
retried in keyset batches, each its own transaction.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from django.db import transaction

from jobs import queue, retry
from jobs.core.state import Fence
from jobs.errors import InvalidRequest, JobNotFound, JobNotRetryable
from jobs.models import Callback, DeliveryPromise, Job
from jobs.runtime import callbacks, dispatch, driver, worker
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.jobs.callback_receiver import Receiver
from tests.integration.jobs.helpers import assert_read_model_matches_receipts
from tests.integration.jobs.retry_builders import (
    T,
    failed_job,
    failed_streams,
    job_payload,
    running_job,
)
from tests.support import present

pytestmark = pytest.mark.django_db


def receipts(job_id: str):
    return store.read(f"jobs/{job_id}")


def count(job_id: str) -> int:
    return len(receipts(job_id))


# ---- one job -----------------------------------------------------------------------------


def test_a_retry_requeues_the_job_on_its_own_stream_with_by_and_a_new_delivery():
    job_id = failed_job(max_attempts=2, error="second try failed")
    done = retry.retry_job(job_id, by="alice", reason="provider is back")
    last = receipts(job_id)[-1]
    assert last.type == "job.retried"
    assert last.body == {
        "type": "job.retried",
        "jobId": job_id,
        "retry": 1,
        "afterAttempt": 2,
        "fromStatus": "failed",
        "by": "alice",
        "reason": "provider is back",
    }
    assert last.context["actor"] == "alice"
    job = queue.get(job_id)
    assert (job.status, job.attempt, job.attempts_used, job.max_attempts) == ("queued", 2, 0, 2)
    assert (job.retries, job.retried_by, job.retried_at) == (1, "alice", last.ts)
    assert job.last_error == "second try failed"
    assert done.job == job
    promise = DeliveryPromise.objects.get(pk=done.started.promise_id)
    assert (promise.id, promise.function, promise.state) == (
        f"{job_id}:retry:1",
        "driver",
        "pending",
    )
    assert_read_model_matches_receipts(job_id)


def test_the_retried_job_is_delivered_again_under_the_next_attempt_number():
    job_id = failed_job()
    started = retry.retry_job(job_id, by="alice").started
    decided = driver.drive(present(started.promise_id))
    assert decided["status"] == "dispatched"
    execute = DeliveryPromise.objects.get(pk=decided["execute"])
    assert (execute.function, execute.attempt) == ("execute", 2)  # attempt 1 is never reused
    fence = Fence("chat:h:9", 2)
    assert queue.lease(job_id, worker_id=fence.worker_id).applied
    assert queue.complete(job_id, {"ok": True}, fence=fence).applied
    job = queue.get(job_id)
    assert (job.status, job.attempt, job.result, job.retries) == ("completed", 2, {"ok": True}, 1)
    assert_read_model_matches_receipts(job_id)


def test_the_fresh_budget_requeues_a_failure_and_then_settles_on_its_last_attempt():
    job_id = failed_job(max_attempts=2)  # attempts 1 and 2 used
    retry.retry_job(job_id, by="alice")
    for attempt, status in ((3, "queued"), (4, "failed")):
        fence = Fence(f"chat:h:{attempt}", attempt)
        assert queue.lease(job_id, worker_id=fence.worker_id).job.attempt == attempt
        written = queue.fail(job_id, "again", fence=fence)
        assert written.job.status == status
        assert receipts(job_id)[-1].body["willRetry"] is (status == "queued")


def test_a_lease_expiry_on_the_last_attempt_is_a_failure_that_can_be_retried():
    job = queue.enqueue("factory", job_payload(), now_ms=T, max_attempts=1).job
    assert queue.lease(job.job_id, worker_id="w", now_ms=T + 1, lease_ms=10).applied
    assert queue.expire_lease(job.job_id, now_ms=T + 100).job.status == "failed"
    assert retry.retry_job(job.job_id, by="bob").job.status == "queued"


def test_a_canceled_job_is_retried_only_when_asked_and_loses_its_abort():
    job_id, fence = running_job()
    queue.abort(job_id, reason="stop it", by="ops")
    assert queue.cancel(job_id, reason="stop it", fence=fence).job.status == "canceled"
    before = count(job_id)
    with pytest.raises(JobNotRetryable) as refused:
        retry.retry_job(job_id, by="alice")
    assert refused.value.refusal == "canceled" and refused.value.status == 409
    assert "is canceled; a canceled job is retried only when asked explicitly" in str(refused.value)
    assert count(job_id) == before
    job = retry.retry_job(job_id, by="alice", include_canceled=True).job
    assert (job.status, job.abort_requested, job.abort_reason, job.cancel_reason) == (
        "queued",
        False,
        None,
        None,
    )
    assert receipts(job_id)[-1].body["fromStatus"] == "canceled"


@pytest.mark.parametrize(
    ("make", "refusal", "text"),
    [
        (lambda: running_job()[0], "active", "is running; only a failed or canceled job"),
        (lambda: queue.enqueue("factory", job_payload()).job.job_id, "active", "is queued;"),
        (lambda: _completed(), "completed", "completed; only a failed or canceled job"),
        (
            lambda: failed_job(kind="factory.task.run", agent="codex", objective="obj-7"),
            "objective",
            "belongs to objective obj-7; its objective decides what runs again",
        ),
    ],
    ids=["running", "queued", "completed", "objective"],
)
def test_a_job_that_may_not_be_retried_is_refused_with_a_clear_reason(make, refusal, text):
    job_id = make()
    before = count(job_id)
    with pytest.raises(JobNotRetryable) as refused:
        retry.retry_job(job_id, by="alice", include_canceled=True)
    assert refused.value.refusal == refusal
    assert text in str(refused.value) and job_id in str(refused.value)
    assert count(job_id) == before
    assert not DeliveryPromise.objects.filter(dispatch_key__contains=":retry:").exists()


def _completed() -> str:
    job_id, fence = running_job()
    assert queue.complete(job_id, "done", fence=fence).applied
    return job_id


def test_a_missing_job_is_not_found_and_bad_input_writes_nothing():
    with pytest.raises(JobNotFound):
        retry.retry_job("no-such-job", by="alice")
    job_id = failed_job()
    before = count(job_id)
    for by, reason in (("", None), ("alice", "x" * 2001)):
        with pytest.raises(InvalidRequest):
            retry.retry_job(job_id, by=by, reason=reason)
    assert count(job_id) == before


def test_a_job_retried_twice_keeps_one_history_and_rising_attempts():
    job_id = failed_job()
    for cycle in (1, 2):
        retry.retry_job(job_id, by=f"op-{cycle}")
        fence = Fence("chat:h:x", cycle + 1)
        assert queue.lease(job_id, worker_id=fence.worker_id).applied
        assert queue.fail(job_id, f"cycle {cycle}", fence=fence).job.status == "failed"
    types = [r.type for r in receipts(job_id)]
    assert types.count("job.retried") == 2 and types.count("job.failed") == 3
    leases = [r.body["attempt"] for r in receipts(job_id) if r.type == "job.leased"]
    assert leases == [1, 2, 3]
    job = queue.get(job_id)
    assert (job.retries, job.retried_by, job.attempt) == (2, "op-2", 3)
    assert sorted(
        DeliveryPromise.objects.filter(job_id=job_id, dispatch_key__contains=":retry:").values_list(
            "id", flat=True
        )
    ) == [f"{job_id}:retry:1", f"{job_id}:retry:2"]


# ---- callbacks fire again ------------------------------------------------------------------


@pytest.fixture
def hooked(settings):
    receiver = Receiver().start()
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT, resonate_callback_url=None, event_callback_url=receiver.url
    )
    yield receiver
    receiver.stop()


def test_a_retried_job_posts_its_dispatch_and_settlement_again(hooked):
    """Each cycle's events are posted, and a retried cycle's carry `retries`: the
    receiver can tell a second `failed` from a redelivery of the first."""
    job_id = queue.enqueue("nobody-retry", job_payload(), now_ms=T).job.job_id
    first = dispatch.start_driver(present(queue.get(job_id)), now_ms=T + 1)
    assert worker.execute(driver.drive(present(first.promise_id))["execute"])["status"] == "failed"
    again = retry.retry_job(job_id, by="alice").started
    assert worker.execute(driver.drive(present(again.promise_id))["execute"])["status"] == "failed"
    events = list(
        Callback.objects.filter(job_id=job_id).order_by("id").values_list("event", "body")
    )
    assert [(event, body["attempt"], body.get("retries")) for event, body in events] == [
        ("dispatched", 0, None),
        ("failed", 1, None),
        ("dispatched", 1, 1),
        ("failed", 2, 1),
    ]
    assert callbacks.deliver_due(now_ms=wall_clock_ms() + 1).acted == 4
    posted = [(p.body["event"], p.body.get("retries")) for p in hooked.posts]
    assert sorted(posted, key=str) == sorted(
        [("dispatched", None), ("failed", None), ("dispatched", 1), ("failed", 1)], key=str
    )
    assert len({p.headers["X-Receipt-Callback-Id"] for p in hooked.posts}) == 4


def test_a_job_canceled_twice_posts_canceled_once_per_cycle(hooked):
    job_id = queue.enqueue("factory", job_payload(), now_ms=T).job.job_id
    queue.abort(job_id, by="ops")
    retry.retry_job(job_id, by="alice", include_canceled=True)
    queue.abort(job_id, by="ops")
    bodies = [b for e, b in Callback.objects.order_by("id").values_list("event", "body")]
    assert [(b["event"], b["attempt"], b.get("retries")) for b in bodies] == [
        ("canceled", 0, None),
        ("canceled", 0, 1),
    ]


# ---- many jobs ----------------------------------------------------------------------------


def test_a_filter_retries_only_the_failed_jobs_it_matches_and_counts_what_it_skipped():
    kept = [failed_job(at_ms=T + n) for n in range(3)]
    other_kind = failed_job(kind="factory.dispatch", at_ms=T + 10)
    objective = failed_job(agent="codex", kind="factory.run", objective="obj-1", at_ms=T + 11)
    queued = queue.enqueue("factory", job_payload(), now_ms=T + 12).job.job_id
    report = retry.retry_matching(
        retry.matching({"kind": "factory.run"}), by="alice", statuses=("failed",)
    )
    assert (report.retried, report.skipped, report.batches) == (3, {"objective": 1}, 1)
    assert report.skipped_jobs == [(objective, "objective")]
    assert report.next_cursor is None and report.errors == []
    assert {queue.get(j).status for j in kept} == {"queued"}
    assert queue.get(other_kind).status == "failed"
    assert queue.get(queued).retries == 0


def test_since_and_until_bound_when_the_jobs_settled():
    early, middle, late = (failed_job(at_ms=T + n * 1000) for n in range(3))
    rows = retry.matching({}, since_ms=T + 1000, until_ms=T + 2000)
    assert retry.retry_matching(rows, by="alice").retried == 1
    assert [queue.get(j).status for j in (early, middle, late)] == ["failed", "queued", "failed"]


def test_an_organization_bound_walk_touches_no_other_organization():
    mine = failed_job(org="org-1")
    theirs = failed_job(org="org-2")
    report = retry.retry_matching(retry.matching({}, organization_id="org-1"), by="t")
    assert report.retried == 1
    assert (queue.get(mine).status, queue.get(theirs).status) == ("queued", "failed")


def test_canceled_jobs_are_walked_only_when_asked():
    job_id = queue.enqueue("factory", job_payload(), now_ms=T).job.job_id
    queue.abort(job_id, by="ops")
    assert retry.retry_matching(Job.objects.all(), by="t", statuses=("failed",)).retried == 0
    assert retry.retry_matching(Job.objects.all(), by="t", statuses=("canceled",)).retried == 1
    with pytest.raises(InvalidRequest, match="status must be failed or canceled"):
        retry.retry_matching(Job.objects.all(), by="t", statuses=("completed",))


def test_a_limit_stops_the_walk_and_the_cursor_goes_on_where_it_stopped():
    ids = [failed_job(at_ms=T + n) for n in range(5)]
    first = retry.retry_matching(Job.objects.all(), by="t", limit=2, batch_size=10)
    assert (first.retried, first.batches) == (2, 1) and first.next_cursor is not None
    assert [queue.get(j).status for j in ids] == ["queued"] * 2 + ["failed"] * 3  # oldest first
    rest = retry.retry_matching(Job.objects.all(), by="t", limit=10, cursor=first.next_cursor)
    assert (rest.retried, rest.next_cursor) == (3, None)
    with pytest.raises(InvalidRequest, match="cursor belongs to a retry of other statuses"):
        retry.retry_matching(
            Job.objects.all(), by="t", statuses=("canceled",), cursor=first.next_cursor
        )
    with pytest.raises(InvalidRequest, match="cursor is not one this API returned"):
        retry.retry_matching(Job.objects.all(), by="t", cursor="%%%")


def test_a_job_that_fails_again_during_the_walk_is_not_retried_twice():
    ids = [failed_job(at_ms=T + n) for n in range(4)]

    def fail_again(report: retry.BulkReport) -> None:
        for job_id in ids:  # the retried jobs fail again at once
            job = queue.get(job_id)
            if job.status == "queued":
                fence = Fence("chat:h:z", job.attempt + 1)
                assert queue.lease(job_id, worker_id=fence.worker_id).applied
                assert queue.fail(job_id, "again", fence=fence).job.status == "failed"

    report = retry.retry_matching(Job.objects.all(), by="t", batch_size=2, on_batch=fail_again)
    assert (report.retried, report.batches) == (4, 2)
    assert {queue.get(j).retries for j in ids} == {1}


def test_a_batch_that_fails_is_rolled_back_whole_and_the_walk_goes_on(monkeypatch):
    ids = [failed_job(at_ms=T + n) for n in range(4)]
    original = dispatch.start_driver

    def start_driver(job, **kwargs):
        if job.job_id == ids[1]:
            raise RuntimeError("broker down")
        return original(job, **kwargs)

    monkeypatch.setattr(dispatch, "start_driver", start_driver)
    report = retry.retry_matching(Job.objects.all(), by="t", batch_size=2)
    assert (report.retried, report.batches, len(report.errors)) == (2, 2, 1)
    assert "RuntimeError: broker down" in report.errors[0]
    assert [queue.get(j).status for j in ids] == ["failed", "failed", "queued", "queued"]
    assert "job.retried" not in [r.type for r in receipts(ids[0])]


def test_a_list_of_ids_retries_each_and_skips_what_it_may_not_see():
    mine, theirs, running = failed_job(org="org-1"), failed_job(org="org-2"), running_job()[0]
    report = retry.retry_ids(
        [mine, theirs, running, "nope", mine],
        by="t",
        visible=lambda organization: organization == "org-1",
    )
    assert report.retried == 1
    assert report.skipped == {"missing": 2, "active": 1}
    assert queue.get(theirs).status == "failed"


def test_two_thousand_failed_jobs_are_retried_in_short_batches_of_their_own():
    """A bulk retry never holds one long transaction: each batch is an atomic block of its
    own (called outside a transaction, as the API, CLI and admin call it, its own
    transaction), none is open between batches, and each batch's retries are written
    before the next begins. Keyset pages, so 20 batches for 2,000 jobs."""
    ids = failed_streams(2000)
    connection = transaction.get_connection()
    outside = list(connection.savepoint_ids)  # the test's own transaction
    seen: list[tuple[int, int, bool]] = []

    def between(report: retry.BulkReport) -> None:
        queued = Job.objects.filter(status="queued").count()
        seen.append((report.batches, queued, connection.savepoint_ids == outside))

    report = retry.retry_matching(Job.objects.all(), by="t", batch_size=100, on_batch=between)
    assert (report.retried, report.skipped_total, report.errors) == (2000, 0, [])
    assert report.batches == math.ceil(2000 / 100) == len(seen)
    assert all(closed for _, _, closed in seen)
    assert [queued for _, queued, _ in seen] == [100 * (n + 1) for n in range(20)]
    assert Job.objects.filter(pk__in=ids, status="queued").count() == 2000
    assert DeliveryPromise.objects.filter(dispatch_key__endswith=":retry:1").count() == 2000
    assert_read_model_matches_receipts(ids[-1])
