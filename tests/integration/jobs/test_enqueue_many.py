"""queue.enqueue_many (T-1): plain requests are written set-based, with exactly the
receipts and rows the per-request path writes; requests that need a lock decision keep
their per-request semantics in request order; dispatch opens one driver promise per
created job with one insert (D-1, D-2). Both backends."""

from __future__ import annotations

import gc

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobs import queue
from jobs.core.timing import driver_timeout_ms
from jobs.core.wire import job_to_wire
from jobs.errors import JobIdTaken
from jobs.models import DeliveryPromise, Job
from jobs.runtime import dispatch, promises
from receipts import new_streams, store
from receipts.core.chain import base36
from tests.integration.jobs.helpers import AUTH, assert_read_model_matches_receipts, payload
from tests.integration.receipts.test_append_new_streams import Randomness, same_randomness
from tests.support import present

pytestmark = pytest.mark.django_db
T0 = 1_800_000_000_000


def plain(i: int = 0, **options):
    agent = options.pop("agent_id", "factory")
    return queue.build_request(agent, options.pop("payload", None) or payload(i=i), **options)


def varied() -> list[queue.EnqueueRequest]:
    """Plain requests that exercise every body and context field."""
    return [
        plain(0),
        plain(1, lane="chat", max_attempts=5, by="ops@example.com"),
        plain(2, session_key="s-allow"),  # allow mode: no lock decision
        plain(
            3,
            agent_id="codex",
            payload={
                "kind": "factory.task.run",
                "authContext": AUTH,
                "timeoutMs": 1_200_000,
                "objectiveId": "obj-1",
                "taskId": "t-1",
                "text": "héllo ✓",
            },
        ),
        plain(
            4,
            agent_id="factory-control",
            payload={"kind": "factory.objective.control", "authContext": AUTH},
        ),
        plain(
            5,
            payload={
                "kind": "factory.run",
                "authContext": {"userId": "u"} | AUTH,
                "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}},
            },
        ),
    ]


def stored(job_ids: list[str]) -> dict[str, list[tuple]]:
    """Raw rows of the receipts, streams and jobs of `job_ids` (JSON as stored)."""
    streams = [f"jobs/{j}" for j in job_ids]
    marks = ", ".join(["%s"] * len(job_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT stream, stream_seq, receipt_id, ts, prev, hash, event_type, body, "
            f"context, hints, event_id FROM receipt_receipt WHERE stream IN ({marks}) "
            "ORDER BY seq",
            streams,
        )
        receipts = cursor.fetchall()
        cursor.execute(
            "SELECT name, head, receipt_count, last_ts, updated_at FROM receipt_stream "
            f"WHERE name IN ({marks}) ORDER BY name",
            streams,
        )
        stream_rows = cursor.fetchall()
        cursor.execute(f"SELECT * FROM jobs_job WHERE id IN ({marks}) ORDER BY id", job_ids)
        jobs = cursor.fetchall()
    return {"receipts": receipts, "streams": stream_rows, "jobs": jobs}


def test_a_batch_writes_byte_for_byte_what_the_per_request_path_writes(monkeypatch):
    requests = varied()

    class Undo(Exception):
        pass

    monkeypatch.setattr(queue, "secrets", Randomness())  # job ids
    same_randomness(monkeypatch)  # receipt ids
    with pytest.raises(Undo), transaction.atomic():
        singles = [queue.enqueue_many([r], now_ms=T0)[0] for r in requests]
        one_by_one = stored([r.job.job_id for r in singles])
        raise Undo
    monkeypatch.setattr(queue, "secrets", Randomness())
    same_randomness(monkeypatch)
    results = queue.enqueue_many(requests, now_ms=T0)
    assert [r.job for r in results] == [r.job for r in singles]
    assert [(r.created, r.steered, r.warnings) for r in results] == [
        (r.created, r.steered, r.warnings) for r in singles
    ]
    assert stored([r.job.job_id for r in results]) == one_by_one
    assert len(one_by_one["receipts"]) == len(one_by_one["jobs"]) == len(requests)
    for result in results:
        assert_read_model_matches_receipts(result.job.job_id)


def test_plain_jobs_get_fresh_ids_and_the_read_model_is_the_fold():
    results = queue.enqueue_many([plain(i) for i in range(40)], now_ms=T0)
    ids = [r.job.job_id for r in results]
    assert len(set(ids)) == 40 and all(r.created and r.job.status == "queued" for r in results)
    assert all(i.startswith(f"{base36(T0)}-") and len(i.split("-")[1]) == 12 for i in ids)
    seqs = [present(store.read(f"jobs/{i}")[0].seq) for i in ids]
    assert seqs == sorted(seqs)  # written in request order
    for job_id in ids:
        assert_read_model_matches_receipts(job_id)
        assert Job.objects.get(pk=job_id).state == job_to_wire(present(queue.get(job_id)))


def test_chunked_runs_change_nothing(monkeypatch):
    from jobs import projector
    from receipts import writer

    monkeypatch.setattr(new_streams, "_CHUNK", 4)
    monkeypatch.setattr(new_streams, "_FIRST_CHUNK", 2)  # chunks of 2, 4, 4, 1 on PostgreSQL
    monkeypatch.setattr(projector, "_CHUNK", 3)
    monkeypatch.setattr(writer, "MAX_PARAMS", 30)
    results = queue.enqueue_many([plain(i) for i in range(11)], now_ms=T0)
    assert Job.objects.filter(pk__in=[r.job.job_id for r in results]).count() == 11
    for result in results:
        assert_read_model_matches_receipts(result.job.job_id)


def test_mixed_batches_keep_per_request_semantics_in_request_order():
    requests = [
        plain(0, session_key="k"),  # 0 plain (allow on k)
        plain(1),  # 1 plain
        plain(2, job_id="job-x"),  # 2 explicit id
        plain(3),  # 3 plain
        plain(4, session_key="k", singleton_mode="cancel"),  # 4 cancels job 0
        plain(5, job_id="job-x"),  # 5 the same id: returned as is
        plain(6),  # 6 plain
        plain(7),  # 7 plain
    ]
    results = queue.enqueue_many(requests, now_ms=T0)
    assert [r.created for r in results] == [True, True, True, True, True, False, True, True]
    assert results[2].job.job_id == results[5].job.job_id == "job-x"
    assert results[5].job.payload["i"] == 2  # J-6: the first one, untouched
    first = queue.get(results[0].job.job_id)
    assert first.status == "canceled" and first.cancel_reason == "singleton cancel"
    assert results[4].job.status == "queued" and results[4].job.session_key == "k"
    order = [results[i].job.job_id for i in (0, 1, 2, 3, 4, 6, 7)]
    enqueued = [r for r in store.read_global(after_seq=0, limit=100) if r.type == "job.enqueued"]
    assert [r.body["jobId"] for r in enqueued] == order
    for result in results:
        assert_read_model_matches_receipts(result.job.job_id)


def test_a_steer_after_a_run_steers_the_newest_job_of_the_run():
    results = queue.enqueue_many(
        [
            plain(0, session_key="s"),
            plain(1, session_key="s"),
            plain(2, session_key="s", singleton_mode="steer"),
        ],
        now_ms=T0,
    )
    assert [(r.created, r.steered) for r in results] == [
        (True, False),
        (True, False),
        (False, True),
    ]
    steered = results[2].job
    assert steered.job_id in {results[0].job.job_id, results[1].job.job_id}
    assert [c.command for c in steered.commands] == ["steer"]


def test_a_generated_id_that_exists_falls_back_to_fresh_ids(monkeypatch):
    monkeypatch.setattr(queue, "secrets", Randomness())
    taken = f"{base36(T0)}-{Randomness().token_hex(6)}"  # the first id the batch will draw
    queue.enqueue("factory", payload(), job_id=taken, now_ms=T0)
    results = queue.enqueue_many([plain(1), plain(2)], now_ms=T0)
    assert all(r.created for r in results)
    assert taken not in {r.job.job_id for r in results}
    assert len(store.read(f"jobs/{taken}")) == 1
    assert queue.get(taken).payload == payload()
    for result in results:
        assert_read_model_matches_receipts(result.job.job_id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("n", [1, 3])
def test_outside_a_transaction_plain_jobs_commit_on_their_own_and_a_taken_id_falls_back(
    monkeypatch, n
):
    """T-1: with no transaction open, a plain enqueue is the store's own transaction (one
    statement on PostgreSQL): nothing is left open, every listener has heard the jobs,
    and a generated id that exists rolls that statement back and is redrawn."""
    heard: list[str] = []
    monkeypatch.setattr(queue, "secrets", Randomness())
    monkeypatch.setattr(
        queue,
        "on_commit_listeners",
        [lambda jobs, dispatched: heard.extend(j.job_id for j in jobs)],
    )
    taken = f"{base36(T0)}-{Randomness().token_hex(6)}"  # the first id the batch will draw
    queue.enqueue("factory", payload(), job_id=taken, now_ms=T0)
    heard.clear()
    results = queue.enqueue_many([plain(i) for i in range(n)], now_ms=T0)
    assert not connection.in_atomic_block
    if connection.vendor == "postgresql":
        assert connection.connection.info.transaction_status.name == "IDLE"
    created = [r.job.job_id for r in results]
    assert all(r.created for r in results) and taken not in created
    assert heard == created
    assert len(store.read(f"jobs/{taken}")) == 1 and queue.get(taken).payload == payload()
    for job_id in created:
        assert_read_model_matches_receipts(job_id)
    assert store.verify(f"jobs/{created[0]}").ok


def test_the_number_of_statements_does_not_grow_with_the_batch():
    def statements(n: int) -> int:
        requests = [plain(i) for i in range(n)]
        with CaptureQueriesContext(connection) as queries:
            queue.enqueue_many(requests, now_ms=T0)
        return len(queries)

    assert statements(100) == statements(10)


def test_warnings_are_given_per_request():
    results = queue.enqueue_many([plain(0, agent_id="nobody-handles-this"), plain(1)], now_ms=T0)
    assert results[0].warnings and "nobody-handles-this" in results[0].warnings[0]
    assert results[0].warnings is not results[1].warnings


@pytest.mark.django_db(transaction=True)
def test_listeners_hear_every_created_job_after_commit(monkeypatch):
    heard: list[tuple[str, str, str]] = []
    batches: list[list[str]] = []
    monkeypatch.setattr(
        queue,
        "mutation_listeners",
        [lambda kind, job, body: heard.append((kind, job.job_id, body["jobId"]))],
    )
    monkeypatch.setattr(
        queue,
        "on_commit_listeners",
        [lambda jobs, dispatched: batches.append([j.job_id for j in jobs])],
    )
    with transaction.atomic():
        results = queue.enqueue_many(
            [
                plain(0),
                plain(1),
                plain(2, job_id="job-y"),
                plain(3, job_id="job-y"),
                plain(4),
                plain(5),
            ],
            now_ms=T0,
        )
        assert heard == [] and batches == []
    created = [r.job.job_id for r in results if r.created]
    assert len(created) == 5
    assert heard == [("job.enqueued", j, j) for j in created]
    # one call per kind: the jobs whose statement opened their deliveries, then the rest
    assert batches == [
        [r.job.job_id for r in results if r.created and r.dispatched is kind]
        for kind in (True, False)
        if any(r.created and r.dispatched is kind for r in results)
    ]
    assert sorted(j for batch in batches for j in batch) == sorted(created)
    assert any(r.dispatched for r in results) is (connection.vendor == "postgresql")


@pytest.mark.django_db(transaction=True)
def test_listeners_hear_nothing_when_the_batch_rolls_back(monkeypatch):
    heard: list[str] = []
    monkeypatch.setattr(queue, "mutation_listeners", [lambda kind, job, body: heard.append(kind)])
    monkeypatch.setattr(
        queue, "on_commit_listeners", [lambda jobs, dispatched: heard.append("batch")]
    )
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.enqueue_many([plain(0), plain(1)], now_ms=T0)
        raise RuntimeError("caller failed")
    assert heard == [] and Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)  # listeners hear a batch once it commits
def test_a_large_batch_runs_with_the_cyclic_collector_paused_and_restores_it(monkeypatch):
    """A batch's objects live until it returns: the collector would walk them again and
    again for nothing. It is paused while a large batch is written and running again after,
    also after a batch that is refused."""
    seen: list[bool] = []
    monkeypatch.setattr(
        queue, "on_commit_listeners", [lambda jobs, dispatched: seen.append(gc.isenabled())]
    )
    assert gc.isenabled()
    queue.enqueue_many([plain(i) for i in range(2)], now_ms=T0)
    queue.enqueue_many([plain(i) for i in range(100)], now_ms=T0)
    assert seen[0] is True and set(seen[1:]) == {False}  # small: untouched; large: paused
    assert gc.isenabled()
    other = queue.enqueue(
        "factory", payload(i=0, authContext={"userId": "u", "organizationId": "org-b"})
    )
    refused = [*(plain(i) for i in range(99)), plain(99, job_id=other.job.job_id)]
    with pytest.raises(JobIdTaken):
        queue.enqueue_many(refused, now_ms=T0, organization=AUTH["organizationId"])
    assert gc.isenabled()


def test_a_batch_leaves_a_paused_collector_paused():
    gc.disable()
    try:
        queue.enqueue_many([plain(i) for i in range(100)], now_ms=T0)
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---- dispatch (D-1, D-2) ---------------------------------------------------------------------


def promise_inserts(queries: CaptureQueriesContext, prepared: list[str] | None = None) -> int:
    """Promise INSERTs sent through Django's cursor and, given the spy's list, through the
    prepared hot path (`promises.prepared`, which on PostgreSQL Django does not see)."""
    unseen = (prepared or []) if connection.vendor == "postgresql" else []
    sent = [q["sql"] for q in queries.captured_queries] + unseen
    return sum(1 for sql in sent if sql.startswith("INSERT INTO jobs_delivery_promise"))


def spy_prepared(monkeypatch) -> list[str]:
    seen: list[str] = []
    original = promises.prepared

    def spy(sql, params, **kwargs):
        seen.append(sql)
        return original(sql, params, **kwargs)

    monkeypatch.setattr(promises, "prepared", spy)
    return seen


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("n", [1, 300])
def test_a_plain_enqueue_opens_its_jobs_deliveries_in_its_own_statement_on_postgres(monkeypatch, n):
    """D-2 on PostgreSQL with the database broker: the driver promise of each new job (the
    broker's task) commits with its receipt in the enqueue's statement, one per chunk;
    the listeners hear the jobs as dispatched, so no dispatch pass runs for them. SQLite
    leaves them to the pass."""
    heard: list[tuple[list[str], bool]] = []
    monkeypatch.setattr(queue, "mutation_listeners", [])  # the ledger's own writes
    monkeypatch.setattr(
        queue,
        "on_commit_listeners",
        [lambda jobs, dispatched: heard.append(([j.job_id for j in jobs], dispatched))],
    )
    seen = spy_prepared(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        results = queue.enqueue_many([plain(i) for i in range(n)], now_ms=T0)
    created = [r.job.job_id for r in results]
    joined = connection.vendor == "postgresql"
    assert heard == [(created, joined)] and all(r.dispatched is joined for r in results)
    assert promise_inserts(queries, seen) == 0  # no separate promise statement either way
    rows = {p.id: p for p in DeliveryPromise.objects.all()}
    if not joined:
        assert rows == {}
        return
    assert set(rows) == set(created)
    with connection.cursor() as cursor:  # written by one transaction: the enqueue's own
        cursor.execute(
            "SELECT count(DISTINCT x) FROM (SELECT xmin::text AS x FROM jobs_delivery_promise "
            "UNION ALL SELECT xmin::text FROM receipt_receipt WHERE stream LIKE 'jobs/%%' "
            "UNION ALL SELECT xmin::text FROM jobs_job) AS t"
        )
        assert cursor.fetchone()[0] == 1
    for result in results:
        p, job = rows[result.job.job_id], result.job
        assert (p.function, p.job_id, p.attempt, p.target_group, p.dispatch_key, p.state) == (
            "driver",
            job.job_id,
            None,
            "driver",
            job.job_id,
            "pending",
        )
        assert p.timeout_at - p.created_at == driver_timeout_ms(present(job.lease_ms))
        assert p.available_at == p.created_at
    dispatch.dispatch_batch([results[0].job])  # a later pass finds the delivery under way
    assert DeliveryPromise.objects.count() == n


@pytest.mark.django_db(transaction=True)
def test_a_joined_delivery_is_rolled_back_with_its_enqueue():
    with pytest.raises(RuntimeError), transaction.atomic():
        results = queue.enqueue_many([plain(0), plain(1)], now_ms=T0)
        assert all(r.dispatched for r in results) is (connection.vendor == "postgresql")
        raise RuntimeError("caller failed")
    assert Job.objects.count() == 0 and DeliveryPromise.objects.count() == 0


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_joined_enqueue_whose_id_is_taken_falls_back_to_the_dispatch_pass(monkeypatch):
    heard: list[bool] = []
    monkeypatch.setattr(queue, "secrets", Randomness())
    monkeypatch.setattr(queue, "on_commit_listeners", [lambda jobs, d: heard.append(d)])
    taken = f"{base36(T0)}-{Randomness().token_hex(6)}"
    queue.enqueue("factory", payload(), job_id=taken, now_ms=T0)
    heard.clear()
    result = queue.enqueue_many([plain(0)], now_ms=T0)[0]
    assert result.created and not result.dispatched and heard == [False]
    assert DeliveryPromise.objects.count() == 0  # the pass (not running here) owns it


@pytest.mark.django_db(transaction=True)
def test_a_taken_id_in_a_later_chunk_rolls_the_whole_run_back_and_it_is_redone(monkeypatch):
    """A run of several chunks is one transaction (on PostgreSQL pipelined, its refusal
    known only at the COMMIT): a generated id that exists in its third chunk leaves
    nothing of the run, which is redone with fresh ids; the connection goes on."""
    monkeypatch.setattr(new_streams, "_FIRST_CHUNK", 2)
    monkeypatch.setattr(new_streams, "_CHUNK", 2)
    monkeypatch.setattr(queue, "secrets", Randomness())
    taken = f"{base36(T0)}-{Randomness().token_hex(30)[48:60]}"  # the fifth id drawn
    queue.enqueue("factory", payload(), job_id=taken, now_ms=T0)
    results = queue.enqueue_many([plain(i) for i in range(6)], now_ms=T0)
    created = [r.job.job_id for r in results]
    assert all(r.created for r in results) and taken not in created and len(set(created)) == 6
    assert Job.objects.count() == 7 and len(store.read(f"jobs/{taken}")) == 1
    assert not connection.in_atomic_block
    if connection.vendor == "postgresql":
        assert connection.connection.info.transaction_status.name == "IDLE"
    for job_id in created:
        assert_read_model_matches_receipts(job_id)
    queue.enqueue_many([plain(9)], now_ms=T0)  # the connection goes on


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_promise_that_exists_under_a_fresh_id_fails_the_statement_and_the_enqueue_goes_on(
    monkeypatch,
):
    """A delivery row under an id no job has (left behind by hand, say) is never written
    over: the joined statement fails as a whole and the enqueue takes its careful path."""
    monkeypatch.setattr(queue, "secrets", Randomness())
    taken = f"{base36(T0)}-{Randomness().token_hex(6)}"  # the first id the batch will draw
    DeliveryPromise.objects.create(
        id=taken,
        function="driver",
        job_id=taken,
        target_group="driver",
        dispatch_key=taken,
        timeout_at=T0,
        created_at=T0,
        state="canceled",
        settled_at=T0,
    )
    [result] = queue.enqueue_many([plain(0)], now_ms=T0)
    assert result.created and result.job.job_id != taken and not result.dispatched
    assert store.stream_info(f"jobs/{taken}") is None and not Job.objects.filter(pk=taken)
    assert DeliveryPromise.objects.get(pk=taken).state == "canceled"  # untouched
    assert_read_model_matches_receipts(result.job.job_id)


def test_dispatch_opens_one_driver_promise_per_created_job_with_one_insert(
    monkeypatch, undispatched
):
    sent: list[tuple] = []
    monkeypatch.setattr(dispatch.transport, "send", lambda *args: sent.append(args))
    jobs = [r.job for r in queue.enqueue_many([plain(i) for i in range(30)], now_ms=T0)]
    seen = spy_prepared(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        dispatch.dispatch_batch(jobs)
    assert promise_inserts(queries, seen) == 1
    assert sent == [("driver", dispatch.DRIVE_TASK, job.job_id) for job in jobs]
    rows = {p.id: p for p in DeliveryPromise.objects.all()}
    assert set(rows) == {job.job_id for job in jobs}
    for job in jobs:
        p = rows[job.job_id]
        assert (p.function, p.job_id, p.attempt, p.target_group, p.dispatch_key, p.state) == (
            "driver",
            job.job_id,
            None,
            "driver",
            job.job_id,
            "pending",
        )
        assert p.timeout_at - p.created_at == driver_timeout_ms(present(job.lease_ms))


def test_dispatch_of_a_job_whose_key_exists_goes_through_start_driver(monkeypatch, undispatched):
    sent: list[str] = []
    monkeypatch.setattr(dispatch.transport, "send", lambda cluster, func, pid: sent.append(pid))
    settled, pending, fresh = (
        r.job for r in queue.enqueue_many([plain(i) for i in range(3)], now_ms=T0)
    )
    for job in (settled, pending):
        assert dispatch.start_driver(job, now_ms=T0).created
    promises.settle(settled.job_id, "resolved", now_ms=T0 + 1)
    sent.clear()
    dispatch.dispatch_batch([settled, pending, fresh, fresh])
    assert sent == [f"{settled.job_id}:recovery:1", fresh.job_id]  # the generation advances
    assert sorted(
        DeliveryPromise.objects.filter(job_id=pending.job_id).values_list("id", flat=True)
    ) == [pending.job_id]  # active delivery
    assert DeliveryPromise.objects.filter(job_id=fresh.job_id).count() == 1


@pytest.mark.postgres_only
def test_dispatch_wakes_the_driver_cluster_once_per_transaction(undispatched):
    jobs = [r.job for r in queue.enqueue_many([plain(i) for i in range(20)], now_ms=T0)]
    with CaptureQueriesContext(connection) as queries:
        dispatch.dispatch_batch(jobs)
    notifies = [q["sql"] for q in queries.captured_queries if "pg_notify" in q["sql"]]
    assert len(notifies) == 1 and DeliveryPromise.objects.count() == 20
