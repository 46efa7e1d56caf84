"""E-2 GET /receipt/stream: every append, prefix filtering, organization isolation and
gap-free resume by global sequence under concurrent writers."""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from django.db import connections, transaction

from receipts import store
from receipts.models import Receipt as ReceiptRow
from tests.integration.live.conftest import token
from tests.integration.live.sse_client import Frame
from tests.support import present

pytestmark = pytest.mark.django_db(transaction=True)


def refreshes(frames: list[Frame]) -> list[tuple[int | None, str]]:
    return [(f.id, f.data) for f in frames if f.event == "receipt-refresh"]


def run_prefix() -> str:
    return f"live-test/{uuid.uuid4().hex[:8]}/"


def test_every_append_arrives_with_its_global_seq_and_stream(server, http, reader):
    prefix = run_prefix()
    with server.stream(http, "/receipt/stream", reader) as sse:
        first = sse.next()
        assert (first.event, first.data) == ("ping", "keepalive")  # the starting position
        written = [store.append(f"{prefix}{i}", {"type": "test.event"})[0] for i in range(3)]
        frames = sse.until(lambda f: f.id == written[-1].seq, message="the last append")
    ours = [r for r in refreshes(frames) if r[1].startswith(prefix)]
    assert ours == [(r.seq, r.stream) for r in written]
    ids = [f.id for f in frames if f.event == "receipt-refresh"]
    assert ids == sorted(ids)


def test_prefix_limits_the_streams(server, http, reader):
    prefix, elsewhere = run_prefix(), run_prefix()
    with server.stream(http, f"/receipt/stream?prefix={prefix}", reader) as sse:
        sse.next()
        store.append(f"{elsewhere}x", {"type": "test.event"})
        mine = store.append(f"{prefix}a", {"type": "test.event"})[0]
        frames = sse.until(lambda f: f.event == "receipt-refresh", message="a refresh")
    assert refreshes(frames) == [(mine.seq, mine.stream)]


def test_an_org_bound_token_sees_only_its_organization(server, http):
    prefix = run_prefix()
    org_token = token(org="org-1", scopes=["jobs:read"])
    with server.stream(http, f"/receipt/stream?prefix={prefix}", org_token) as sse:
        sse.next()
        store.append(f"{prefix}theirs", {"type": "t"}, context={"organizationId": "org-2"})
        store.append(f"{prefix}nobody", {"type": "t"})
        mine = store.append(f"{prefix}mine", {"type": "t"}, context={"organizationId": "org-1"})
        frames = sse.until(lambda f: f.event == "receipt-refresh", message="a refresh")
    assert refreshes(frames) == [(mine[0].seq, mine[0].stream)]


def test_last_event_id_query_parameter_resumes_like_the_header(server, http, reader):
    prefix = run_prefix()
    first = store.append(f"{prefix}a", {"type": "t"})[0]
    later = [store.append(f"{prefix}{s}", {"type": "t"})[0] for s in "bc"]
    with server.stream(
        http, f"/receipt/stream?prefix={prefix}&lastEventId={first.seq}", reader
    ) as sse:
        frames = sse.until(lambda f: f.id == later[-1].seq, message="the last append")
    assert refreshes(frames) == [(r.seq, r.stream) for r in later]


def _writer(prefix: str, index: int, stop: threading.Event, rng: random.Random) -> int:
    """Append to several streams until told to stop.

    On PostgreSQL each commit is held open a random moment so that sequences commit out
    of order (the case resume must survive). SQLite has one writer at a time and commits
    in order; there the writers pause between commits instead, or they would starve the
    server's own writes (a token's last-used stamp) of the database lock.
    """
    postgres = connections["default"].vendor == "postgresql"
    count = 0
    try:
        while not stop.is_set():
            with transaction.atomic():
                store.append(f"{prefix}{index}-{count % 5}", {"type": "test.burst", "n": count})
                if postgres:
                    stop.wait(rng.uniform(0, 0.01))
            if not postgres:
                stop.wait(rng.uniform(0.002, 0.01))
            count += 1
    finally:
        connections.close_all()
    return count


def test_resume_after_disconnects_loses_nothing_while_writers_keep_appending(server, http, reader):
    prefix = run_prefix()
    stop = threading.Event()
    writers = [
        threading.Thread(target=_writer, args=(prefix, i, stop, random.Random(i))) for i in range(4)
    ]
    received: list[int] = []
    last_id: int | None = None
    try:
        for attempt in range(8):  # connect, read a little, drop the connection, resume
            headers = {} if last_id is None else {"Last_Event_ID": str(last_id)}
            with server.stream(http, f"/receipt/stream?prefix={prefix}", reader, **headers) as sse:
                if attempt == 0:
                    for thread in writers:
                        thread.start()
                got = 0
                while got < 20:
                    frame = sse.next()
                    assert frame is not None
                    last_id = frame.id if frame.id is not None else last_id
                    if frame.event == "receipt-refresh":
                        assert frame.data.startswith(prefix)
                        received.append(frame.id)
                        got += 1
    finally:
        stop.set()
        for thread in writers:
            if thread.is_alive():
                thread.join(timeout=30)
    expected = set(
        ReceiptRow.objects.filter(stream__startswith=prefix).values_list("seq", flat=True)
    )
    with server.stream(
        http, f"/receipt/stream?prefix={prefix}", reader, Last_Event_ID=str(last_id)
    ) as sse:
        while not expected <= set(received):
            frame = sse.next()
            assert frame is not None
            if frame.event == "receipt-refresh":
                received.append(frame.id)
    assert len(received) == len(set(received)), "a receipt was delivered twice"
    assert set(received) == expected
    assert len(expected) > 90


@pytest.mark.postgres_only
def test_a_receipt_that_commits_late_is_delivered_before_later_sequences(server, http, reader):
    """The horizon: seq N+1 committed while N is still open is held back until N commits."""
    prefix = run_prefix()
    appended, release = threading.Event(), threading.Event()
    held: list[int] = []

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                held.append(present(store.append(f"{prefix}slow", {"type": "t"})[0].seq))
                appended.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_writer)
    with server.stream(http, f"/receipt/stream?prefix={prefix}", reader) as sse:
        sse.next()
        thread.start()
        try:
            assert appended.wait(timeout=10)
            fast = store.append(f"{prefix}fast", {"type": "t"})[0]
            assert present(fast.seq) > held[0]
            # Three keepalives later the committed higher seq has still not been sent:
            # the position stays below the open one.
            pings = 0
            while pings < 3:
                frame = sse.next()
                assert frame is not None and frame.event == "ping", frame
                assert frame.id < held[0]
                pings += 1
        finally:
            release.set()
            thread.join(timeout=30)
        frames = sse.until(lambda f: f.id == fast.seq, message="the fast receipt")
    assert refreshes(frames) == [(held[0], f"{prefix}slow"), (fast.seq, f"{prefix}fast")]
