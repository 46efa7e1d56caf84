"""Rate limits and per-key caps below the runtime (issue 34 item 4): the begin counts a
capped key's running jobs and holds the delivery at the cap; the running job that stops
wakes the key's oldest held delivery in its own transaction; a rate's window holds starts
past N, spaced out, and the due loop gives them back. The worker processes' side is
tests/runtime/test_limits.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from django_q.utils import get_func_repr

from jobs import dashboard, diagnosis, handlers, limits, promise_sql, queue
from jobs.core.limits import UNTIL_WOKEN_MS, Limit
from jobs.handler_contract import JobResult
from jobs.models import DeliveryPromise, Job
from jobs.runtime import attempt as attempts
from jobs.runtime import driver, due
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from receipts.db import prepared
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "test-limits"
KIND = "factory.run"


@pytest.fixture(autouse=True)
def _handler(monkeypatch, settings):
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))
    # SQLite: the enqueue's dispatch runs in the caller, not in a thread racing the test
    settings.RECEIPT = dataclasses.replace(settings.RECEIPT, dispatch_mode="inline")


@pytest.fixture
def declare():
    names: list[str] = []

    def declare(**fields: Any) -> Limit:
        limit = limits.register_limit(Limit(**fields))
        names.append(limit.name)
        return limit

    yield declare
    for name in names:
        limits.forget(name)


def delivered(**extra: Any) -> tuple[str, str]:
    job = queue.enqueue(AGENT, payload(KIND, **extra)).job
    assert driver.drive(job.job_id)["status"] == "dispatched"
    return job.job_id, driver.execute_promise_id(job.job_id, 1, job.job_id)


def begin(job_id: str, execute_id: str, *, now: int | None = None):
    return attempts.begin(
        execute_id,
        job_id=job_id,
        attempt=1,
        worker_id="chat:limits:1",
        now_ms=wall_clock_ms() if now is None else now,
    )


def complete(running: attempts.Running) -> None:
    ended = attempts.settle(running, "completed", now_ms=wall_clock_ms, result={"ok": True})
    assert ended.status == "completed"


def deliverable() -> set[str]:
    """What the broker's take of the test jobs' worker group would take now."""
    group = DeliveryPromise.objects.filter(function="execute").values_list(
        "target_group", flat=True
    )[0]
    rows, _ = prepared(promise_sql.PEEK, [group, wall_clock_ms() + 1, 10_000])
    return {row[0] for row in rows}


def test_a_key_at_its_cap_holds_the_next_start_and_a_stop_wakes_it(declare):
    declare(name="per-customer", kinds=(KIND,), concurrency=2, key="customer.id")
    first, second, third = (delivered(customer={"id": "c1"}) for _ in range(3))
    other = delivered(customer={"id": "c2"})

    running = [begin(*first), begin(*second)]
    assert all(isinstance(r, attempts.Running) for r in running)
    held = begin(*third)
    assert isinstance(held, attempts.Ended) and held.status == "held"
    assert held.outcome["heldBy"] == "cap:per-customer:c1"
    assert isinstance(begin(*other), attempts.Running)  # another key has its own slots

    job = queue.get(third[0])
    assert (job.status, job.attempt) == ("queued", 0)  # nothing was written to the job
    promise = DeliveryPromise.objects.get(pk=third[1])
    assert (promise.held_by, promise.due_at, promise.worker_id) == (
        "cap:per-customer:c1",
        UNTIL_WOKEN_MS,
        None,
    )
    assert promise.timeout_at > UNTIL_WOKEN_MS  # the sweep and the redrive leave it alone
    assert third[1] not in deliverable()
    lease = store.read(f"jobs/{first[0]}")[1]
    assert (lease.type, lease.body["limitKey"]) == ("job.leased", "per-customer:c1")
    assert Job.objects.get(pk=first[0]).limit_key == "per-customer:c1"
    assert limits.running("per-customer:c1") == 2

    complete(running[0])  # a slot frees: the held delivery is woken in that transaction

    promise.refresh_from_db()
    assert (promise.held_by, promise.due_at) == (None, None)
    assert wall_clock_ms() - 60_000 < promise.timeout_at < UNTIL_WOKEN_MS
    assert third[1] in deliverable()
    assert isinstance(begin(*third), attempts.Running)
    assert limits.running("per-customer:c1") == 2
    for job_id in (first[0], third[0]):
        assert_read_model_matches_receipts(job_id)


def test_a_cap_without_a_key_counts_every_job_it_covers_and_a_missing_key_shares_one(declare):
    declare(name="one-at-a-time", kinds=(KIND,), concurrency=1)
    a, b = delivered(), delivered(customer={"id": "x"})
    assert isinstance(begin(*a), attempts.Running)
    held = begin(*b)
    assert isinstance(held, attempts.Ended) and held.outcome["heldBy"] == "cap:one-at-a-time"


def test_a_canceled_held_job_does_not_swallow_the_wake(declare):
    declare(name="solo", kinds=(KIND,), concurrency=1, key="customer")
    first, gone, waiting = (delivered(customer="c") for _ in range(3))
    running = begin(*first)
    assert isinstance(running, attempts.Running)
    assert begin(*gone).status == "held"
    assert begin(*waiting).status == "held"
    queue.command(gone[0], "abort", reason="not needed")  # queued: canceled at once
    assert queue.get(gone[0]).status == "canceled"

    complete(running)

    assert waiting[1] in deliverable()  # the oldest held delivery whose job still waits
    assert gone[1] not in deliverable()


def test_a_failed_attempt_that_retries_frees_its_slot_too(declare):
    declare(name="solo", kinds=(KIND,), concurrency=1, key="customer")
    first, waiting = delivered(customer="c"), delivered(customer="c")
    running = begin(*first)
    assert begin(*waiting).status == "held"
    ended = attempts.settle(running, "failed", now_ms=wall_clock_ms, error="boom")
    assert queue.get(first[0]).status == "queued"  # its retry waits like any job
    assert ended.status == "failed"
    assert waiting[1] in deliverable()


def test_a_rate_holds_starts_past_n_per_window_spaced_out_and_the_due_loop_returns_them(
    declare,
):
    declare(name="provider", kinds=(KIND,), rate=2, per_ms=60_000)
    now = wall_clock_ms()
    jobs = [delivered() for _ in range(4)]
    assert isinstance(begin(*jobs[0], now=now), attempts.Running)
    assert isinstance(begin(*jobs[1], now=now + 1_000), attempts.Running)
    third, fourth = begin(*jobs[2], now=now + 2_000), begin(*jobs[3], now=now + 2_000)
    assert (third.status, third.outcome["heldBy"]) == ("held", "rate:provider")
    # room when the first start leaves the window; the next one a share of the period later
    assert third.outcome["dueAt"] == now + 60_000
    assert fourth.outcome["dueAt"] == now + 60_000 + 30_000
    assert jobs[2][1] not in deliverable()

    assert due.release_due(now_ms=now + 59_999).acted == 0
    assert due.release_due(now_ms=now + 60_000).acted == 1
    assert jobs[2][1] in deliverable() and jobs[3][1] not in deliverable()
    assert isinstance(begin(*jobs[2], now=now + 60_000), attempts.Running)
    assert DeliveryPromise.objects.get(pk=jobs[2][1]).held_by is None


def test_a_refused_rate_gives_back_the_start_another_rate_gave(declare):
    wide = declare(name="wide", kinds=(KIND,), rate=10, per_ms=60_000)
    declare(name="narrow", kinds=(KIND,), rate=1, per_ms=60_000)
    now = wall_clock_ms()
    a, b = delivered(), delivered()
    assert isinstance(begin(*a, now=now), attempts.Running)
    assert begin(*b, now=now).outcome["heldBy"] == "rate:narrow"
    used = limits.usage(wide, now_ms=now)["rate"]["used"]
    assert used == 1  # the held begin's start of "wide" was given back


def test_the_keeper_wakes_what_a_raised_cap_frees(declare):
    declare(name="solo", kinds=(KIND,), concurrency=1, key="customer")
    first, waiting = delivered(customer="c"), delivered(customer="c")
    assert isinstance(begin(*first), attempts.Running)
    assert begin(*waiting).status == "held"
    assert due.keep_limits(now_ms=wall_clock_ms()).acted == 0  # still at its cap

    limits.forget("solo")
    declare(name="solo", kinds=(KIND,), concurrency=2, key="customer")
    assert due.keep_limits(now_ms=wall_clock_ms()).acted == 1
    assert waiting[1] in deliverable()


def test_the_dashboard_usage_shows_each_part_of_a_limit(declare):
    limit = declare(name="mixed", kinds=(KIND,), rate=5, per_ms=1_000, concurrency=1, key="k")
    a, b = delivered(k="one"), delivered(k="one")
    assert isinstance(begin(*a), attempts.Running)
    assert begin(*b).status == "held"
    shown = limits.usage(limit, now_ms=wall_clock_ms())
    assert shown["rate"] == {"text": "5/s", "used": 1, "of": 5, "held": 0}
    assert shown["concurrency"]["busiest"] == [{"key": "one", "running": 1, "full": True}]
    assert shown["concurrency"]["held"] == 1


def test_diagnosis_names_the_limit_that_holds_a_job(declare):
    declare(name="solo", kinds=(KIND,), concurrency=1, key="customer")
    declare(name="provider", kinds=(KIND,), rate=1, per_ms=3_600_000)
    first, capped = delivered(customer="acme"), delivered(customer="acme")
    rated = delivered(customer="other")
    assert isinstance(begin(*first), attempts.Running)
    assert begin(*capped).status == "held"
    assert begin(*rated).outcome["heldBy"] == "rate:provider"

    def held(job_id: str) -> list[dict[str, str]]:
        blockers = diagnosis.diagnosis(job_id)["blockers"]
        return [b for b in blockers if b["code"] in ("held_by_limit", "delivery_pending")]

    assert held(capped[0]) == [
        {
            "code": "held_by_limit",
            "detail": "held by the concurrency cap solo: 1 of 1 running for key acme; it starts "
            "as soon as one of them stops",
        }
    ]  # and no pending delivery: it is not a lost one
    shown = held(rated[0])
    assert [b["code"] for b in shown] == ["held_by_limit"], shown
    detail = shown[0]["detail"]
    assert detail.startswith("held by the rate limit provider (1/h): due again at ")


def test_the_dashboard_shows_each_limit_and_how_full_it_is(declare, admin_client):
    declare(name="per-customer", kinds=(KIND,), concurrency=1, key="customer")
    declare(name="provider", queues=("chat", "codex"), rate=10, per_ms=60_000)
    first, waiting = delivered(customer="acme"), delivered(customer="acme")
    assert isinstance(begin(*first), attempts.Running)
    assert begin(*waiting).status == "held"

    rows = dashboard.snapshot(include_config=False)["limits"]
    by_part = {(row["limit"], row["key"]): row for row in rows}
    cap = by_part[("per-customer", "acme")]
    assert (cap["part"], cap["busy"], cap["slots"], cap["held"]) == (
        "cap 1 at once per customer",
        1,
        1,
        1,
    )
    assert cap["covers"] == f"kind {KIND}"
    rate = by_part[("provider", "—")]
    # one start in the window: the held begin took none (its cap refused it first)
    assert (rate["part"], rate["busy"], rate["slots"], rate["held"]) == ("rate 10/m", 1, 10, 0)
    assert rate["covers"] == "queue chat, queue codex"

    page = admin_client.get("/admin/jobs/job/dashboard/").content.decode()
    assert "Limits: rates and concurrency caps" in page
    assert "cap 1 at once per customer" in page


def test_a_canceled_job_s_held_delivery_is_not_counted_as_held(declare):
    limit = declare(name="solo", kinds=(KIND,), concurrency=1, key="customer")
    first, gone = delivered(customer="c"), delivered(customer="c")
    assert isinstance(begin(*first), attempts.Running)
    assert begin(*gone).status == "held"
    assert limits.usage(limit, now_ms=wall_clock_ms())["concurrency"]["held"] == 1
    queue.command(gone[0], "abort", reason="not needed")
    assert limits.usage(limit, now_ms=wall_clock_ms())["concurrency"]["held"] == 0


def test_with_redis_the_woken_delivery_s_task_is_pushed_after_the_commit(declare, monkeypatch):
    from django.conf import settings as django_settings
    from django_q.signing import SignedPackage

    from jobs.runtime import transport
    from tests.integration.jobs.test_redis_tasks import _Broker

    declare(name="solo", kinds=(KIND,), concurrency=1, key="customer")
    first, waiting = delivered(customer="c"), delivered(customer="c")
    running = begin(*first)
    assert begin(*waiting).status == "held"
    broker = _Broker()
    redis_cluster = {k: v for k, v in django_settings.Q_CLUSTER.items() if k != "orm"}
    monkeypatch.setattr(django_settings, "Q_CLUSTER", {**redis_cluster, "redis": "redis://x"})
    monkeypatch.setattr(transport, "_broker", lambda cluster: broker)

    complete(running)

    [package] = broker.pushed  # the woken delivery, pushed once its wake committed
    task = SignedPackage.loads(package)
    assert get_func_repr(task["func"]) == "jobs.runtime.tasks.execute"
    assert task["args"] == (waiting[1],)
    assert task["kwargs"]["job_id"] == waiting[0] and task["kwargs"]["attempt"] == 1


def test_the_cli_lists_each_limit_and_how_full_it_is(declare):
    from io import StringIO

    from django.core.management import call_command

    declare(name="per-customer", kinds=(KIND,), concurrency=1, key="customer")
    declare(name="provider", queues=("chat",), rate=10, per_ms=60_000)
    first, waiting = delivered(customer="acme"), delivered(customer="acme")
    assert isinstance(begin(*first), attempts.Running)
    assert begin(*waiting).status == "held"

    out = StringIO()
    call_command("jobs", "limits", stdout=out)
    text = out.getvalue()
    assert "per-customer" in text and f"kind {KIND}" in text
    assert "cap 1 at once per customer: acme 1/1, 1 held" in text
    assert "rate 10/m: 1 of 10 in the window, 0 held" in text
    out = StringIO()
    call_command("jobs", "limits", "--json", stdout=out)
    [cap] = [shown for shown in json.loads(out.getvalue())["limits"] if "concurrency" in shown]
    assert cap["concurrency"]["busiest"] == [{"key": "acme", "running": 1, "full": True}]


def test_a_start_under_a_cap_is_stamped_once_it_holds_the_key(declare):
    """The begin's time is read before the cap's key is locked, and that lock may wait for
    a stopping job of the key: a capped start is stamped again once it holds the key, so
    its lease never reads as begun before the job it waited for ended. A start under no
    cap keeps the time it was given."""
    declare(name="per-customer", kinds=(KIND,), concurrency=1, key="customer.id")
    capped = delivered(customer={"id": "c1"})
    free = queue.enqueue(AGENT, payload("factory.dispatch")).job
    assert driver.drive(free.job_id)["status"] == "dispatched"
    free_id = driver.execute_promise_id(free.job_id, 1, free.job_id)
    given, later = wall_clock_ms(), wall_clock_ms() + 5_000

    for (job_id, execute_id), stamped in (((free.job_id, free_id), given), (capped, later)):
        running = attempts.begin(
            execute_id,
            job_id=job_id,
            attempt=1,
            worker_id="chat:limits:1",
            now_ms=given,
            clock=lambda: later,
        )
        assert isinstance(running, attempts.Running)
        [leased] = [r for r in store.read(f"jobs/{job_id}") if r.type == "job.leased"]
        assert leased.ts == stamped
        assert running.job.lease_ms is not None
        assert running.job.lease_until == stamped + running.job.lease_ms
