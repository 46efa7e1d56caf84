"""Round trips of the hot path on PostgreSQL (T-3, T-4): on an idle machine each one is
a wake-up of the server and of the caller, most of a job's latency. Counted in libpq's
protocol trace: each time the client, having sent messages, reads the server's answer
(the server answers a pipeline only at a Sync or a Flush, when the client waits).

- a pipelined transaction sends its BEGIN with its first statements and its COMMIT with
  its last (psycopg would wait for a BEGIN of its own);
- a result read inside the pipeline costs one round trip, not a nested block's two;
- an append there does not wait for its receipts' global seqs."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import pytest
from django.db import connection, transaction

from jobs import handlers, queue
from jobs.handler_contract import JobResult
from jobs.runtime import attempt as attempts
from jobs.runtime import driver
from receipts import new_streams, store
from receipts.clock import now_ms as wall_clock_ms
from receipts.db import pipelined_transaction
from receipts.models import Stream as StreamRow
from tests.integration.jobs.helpers import payload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]
AGENT = "test-round-trips"


@contextmanager
def traced() -> Iterator[list[str]]:
    """The connection's protocol trace inside the block (its lines, once it ended)."""
    from psycopg import pq

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    fd, path = tempfile.mkstemp(prefix="receipt-trace-")
    pgconn.trace(fd)
    pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
    lines: list[str] = []
    try:
        yield lines
    finally:
        pgconn.untrace()
        with open(path) as trace:
            lines += trace.readlines()
        os.close(fd)
        os.unlink(path)


@contextmanager
def syncs() -> Iterator[Callable[[], int]]:
    """Counts the round trips of the connection inside the block."""
    with traced() as lines:
        yield lambda: round_trips(lines)


def round_trips(lines: list[str]) -> int:
    sides = [line[:1] for line in lines if line[:1] in ("F", "B")]
    # a round trip: messages sent, then the server's answer read
    return sum(1 for pair in pairwise(sides) if pair == ("F", "B"))


def statements(lines: list[str]) -> list[str]:
    """The statements the client had the server run: each Execute (extended protocol)
    or simple Query message, with the text of the Parse or Query that named it."""
    sent = [line.split("\t") for line in lines if line.startswith("F")]
    return [
        fields[3] if len(fields) > 3 else "" for fields in sent if fields[2] in ("Execute", "Query")
    ]


def test_an_append_in_a_pipelined_transaction_costs_two_round_trips():
    store.append("rt/a", {"type": "ping"})  # statements prepared, the stream exists
    with syncs() as counted, pipelined_transaction():
        receipts = store.append("rt/a", {"type": "ping"})
    assert counted() == 2  # the lock's head; the write with the COMMIT
    assert receipts[0].stream_seq == 2 and receipts[0].seq is None  # not waited for
    assert StreamRow.objects.get(name="rt/a").receipt_count == 2
    assert connection.get_autocommit() and connection.connection.autocommit


def test_a_statement_the_server_refuses_mid_block_keeps_nothing():
    store.append("rt/b", {"type": "ping"})
    with pytest.raises(Exception), pipelined_transaction():  # noqa: B017 (the server's error)
        store.append("rt/new", {"type": "ping"})
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")
    assert not StreamRow.objects.filter(name="rt/new").exists()
    assert connection.get_autocommit() and connection.connection.autocommit
    with transaction.atomic():  # the connection goes on as usual
        store.append("rt/b", {"type": "ping"})
    assert StreamRow.objects.get(name="rt/b").receipt_count == 2


@pytest.mark.parametrize("n", [1, 700])
def test_a_batch_enqueue_waits_for_the_server_once(monkeypatch, n):
    """T-1: a plain batch, chunk after chunk, is one pipelined transaction that reads
    nothing back: its BEGIN, every chunk's statement and its COMMIT, then one wait."""

    def plain(i: int) -> queue.EnqueueRequest:  # no Factory ledger row (written after)
        return queue.build_request(AGENT, payload("factory.dispatch", i=i))

    for warm in (1, 3):  # the statements of both shapes (one row, many rows) are prepared
        queue.enqueue_many([plain(i) for i in range(warm)])
    monkeypatch.setattr(new_streams, "_FIRST_CHUNK", 5)
    with syncs() as counted:
        results = queue.enqueue_many([plain(i) for i in range(n)])
    assert counted() == 1
    assert all(r.created and r.dispatched for r in results) and len(results) == n
    assert StreamRow.objects.filter(name__in=[f"jobs/{r.job.job_id}" for r in results]).count() == n
    assert connection.connection.info.transaction_status.name == "IDLE"


def _job() -> Any:
    # a kind with no Factory ledger row (bookkeeping written after the commit)
    job = queue.enqueue(AGENT, payload("factory.dispatch")).job
    driver.drive(job.job_id)  # prepares the statements of a pass
    return job


def _begin(job: Any, seen: Any = None) -> attempts.Running:
    running = attempts.begin(
        driver.execute_promise_id(job.job_id, 1, job.job_id),
        job_id=job.job_id,
        attempt=1,
        worker_id="chat:rt:1",
        now_ms=wall_clock_ms(),
        seen=seen,
    )
    assert isinstance(running, attempts.Running)
    return running


def test_a_job_from_driver_to_settlement_costs_five_round_trips(monkeypatch):
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))
    attempts.settle(_begin(_job()), "completed", now_ms=wall_clock_ms)  # all prepared once
    job = queue.enqueue(AGENT, payload("factory.dispatch")).job
    with syncs() as drove:
        driver.drive(job.job_id)
    with syncs() as began:
        running = _begin(job)
    with syncs() as settled:
        ended = attempts.settle(running, "completed", now_ms=wall_clock_ms, result={"ok": 1})
    assert ended.status == "completed"
    assert queue.get(job.job_id).status == "completed"
    # the pass's one statement; the claim with the lock and read, then the writes with the
    # COMMIT; the settlement on the state the worker holds: one statement
    assert (drove(), began(), settled()) == (1, 2, 1)


def executed(lines: list[str]) -> list[str]:
    """The statements the client had the server run: its Execute and simple Query
    messages (a Parse only prepares)."""
    return [line for line in lines if line.split("\t")[2:3] in (["Execute"], ["Query"])]


def test_a_begin_and_a_settlement_on_known_state_are_one_statement_each(monkeypatch, caplog):
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))
    for _ in range(2):  # the second with every statement prepared
        job = _job()
        seen = queue.get(job.job_id)
        with traced() as began:
            running = _begin(job, seen)
        with traced() as settled:
            ended = attempts.settle(running, "completed", now_ms=wall_clock_ms, result={"n": 1})
    assert ended.status == "completed" and queue.get(job.job_id).status == "completed"
    assert [len(executed(began)), len(executed(settled))] == [1, 1]
    assert [round_trips(began), round_trips(settled)] == [1, 1]
    # no transaction of its own around it: the statement is one
    assert not [line for line in began + settled if "BEGIN" in line or "COMMIT" in line]
    types = [r.type for r in store.read(f"jobs/{job.job_id}")]
    assert types == ["job.enqueued", "job.leased", "job.heartbeat", "job.completed"]
    assert store.verify(f"jobs/{job.job_id}").ok
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def _next(job: Any, seen: Any) -> attempts.Next:
    promise = driver.execute_promise_id(job.job_id, 1, job.job_id)
    return attempts.Next(promise, 1, "chat:rt:1", seen)


def test_a_completion_and_the_next_begin_are_one_statement(monkeypatch, caplog):
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))
    for _ in range(2):  # the second with every statement prepared
        running = _begin(_job())
        following = _job()
        seen = queue.get(following.job_id)
        with traced() as chained:
            ended, begun = attempts.complete_then_begin(
                running, _next(following, seen), now_ms=wall_clock_ms, result={"n": 1}
            )
    assert ended.status == "completed" and begun is not None
    assert [len(executed(chained)), round_trips(chained)] == [1, 1]
    assert queue.get(running.job.job_id).status == "completed"
    assert (begun.job.status, begun.fence) == ("running", attempts.Fence("chat:rt:1", 1))
    for job_id, types in (
        (running.job.job_id, ["job.enqueued", "job.leased", "job.heartbeat", "job.completed"]),
        (following.job_id, ["job.enqueued", "job.leased", "job.heartbeat"]),
    ):
        assert [r.type for r in store.read(f"jobs/{job_id}")] == types
        assert store.verify(f"jobs/{job_id}").ok
    # the next job's handler runs on it and settles as any begun attempt
    assert attempts.settle(begun, "completed", now_ms=wall_clock_ms).status == "completed"
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_next_job_that_moved_since_its_take_is_left_to_its_own_begin(monkeypatch):
    """Canceled after the take: the one statement is refused whole, the completion is
    written alone, and the next job's own begin then finds it settled."""
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))
    running = _begin(_job())
    following = _job()
    seen = queue.get(following.job_id)
    assert queue.abort(following.job_id, reason="stop", by="test").canceled
    ended, begun = attempts.complete_then_begin(
        running, _next(following, seen), now_ms=wall_clock_ms, result=None
    )
    assert (ended.status, begun) == ("completed", None)
    assert queue.get(running.job.job_id).status == "completed"
    assert queue.get(following.job_id).status == "canceled"  # not leased by the refused part
    late = attempts.begin(
        _next(following, seen).promise_id,
        job_id=following.job_id,
        attempt=1,
        worker_id="chat:rt:1",
        now_ms=wall_clock_ms(),
        seen=seen,
    )
    assert isinstance(late, attempts.Ended) and late.status == "terminal_state"
