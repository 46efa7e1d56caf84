"""E-1 GET /jobs/<id>/events against a real uvicorn process."""

from __future__ import annotations

import json

import pytest

from jobs import queue
from jobs.core.state import Fence
from receipts import store
from tests.integration.live.conftest import enqueue
from tests.support import present

pytestmark = pytest.mark.django_db(transaction=True)


def last_seq(stream: str) -> int:
    return present(store.read(stream)[-1].seq)


def test_connect_sends_init_then_the_job(server, http, reader):
    job = enqueue()
    with server.stream(http, f"/jobs/{job.job_id}/events", reader) as sse:
        headers = sse.response.headers
        assert sse.response.status_code == 200
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["cache-control"] == "no-store"
        assert headers["x-accel-buffering"] == "no"
        init, first = sse.next(), sse.next()
    assert (init.event, init.data) == ("job-refresh", "init")
    assert first.event == "job"
    assert json.loads(first.data)["id"] == job.job_id
    assert json.loads(first.data)["status"] == "queued"


def test_a_receipt_of_the_job_arrives_as_job_refresh_with_its_global_seq(server, http, reader):
    job, other = enqueue(), enqueue()
    with server.stream(http, f"/jobs/{job.job_id}/events", reader) as sse:
        sse.until(lambda f: f.event == "job", message="the first job frame")
        queue.lease(other.job_id, worker_id="w-other")  # another job: never shown here
        queue.lease(job.job_id, worker_id="w-1")
        seq = last_seq(job.stream)
        frames = sse.until(lambda f: f.event == "job", message="the job frame after the lease")
    refreshes = [(f.id, f.data) for f in frames if f.event == "job-refresh"]
    assert refreshes == [(seq, "job.leased")]
    assert json.loads(frames[-1].data)["status"] == "leased"
    assert json.loads(frames[-1].data)["workerId"] == "w-1"


def test_keepalive_pings_carry_the_position_reached(server, http, reader):
    job = enqueue()
    with server.stream(http, f"/jobs/{job.job_id}/events", reader) as sse:
        init = sse.next()
        pings = [
            f
            for f in sse.until(lambda f: f.event == "ping", message="a keepalive")
            if f.event == "ping"
        ]
    assert pings[0].data == "keepalive"
    assert pings[0].id is not None and pings[0].id >= init.id >= last_seq(job.stream)


def test_the_stream_ends_at_a_terminal_state_and_a_resume_then_gets_204(server, http, reader):
    job = enqueue()
    leased = queue.lease(job.job_id, worker_id="w-1").job
    with server.stream(http, f"/jobs/{job.job_id}/events", reader) as sse:
        sse.until(lambda f: f.event == "job", message="the first job frame")
        queue.complete(job.job_id, {"answer": 42}, fence=Fence("w-1", leased.attempt))
        frames = sse.rest()
        assert sse.closed_by_server
    assert [(f.event, f.data) for f in frames if f.event == "job-refresh"] == [
        ("job-refresh", "job.completed")
    ]
    assert json.loads(frames[-1].data)["status"] == "completed"
    last_id = max(f.id for f in frames if f.id is not None)
    assert last_id == last_seq(job.stream)

    resumed = http.get(
        f"{server.url}/jobs/{job.job_id}/events",
        headers={"Authorization": f"Bearer {reader}", "Last-Event-ID": str(last_id)},
    )
    assert resumed.status_code == 204  # EventSource stops reconnecting


def test_resume_replays_what_was_missed_then_ends_at_the_terminal_state(server, http, reader):
    job = enqueue()
    enqueued = last_seq(job.stream)
    leased = queue.lease(job.job_id, worker_id="w-1").job
    queue.heartbeat(job.job_id, fence=Fence("w-1", leased.attempt))
    queue.complete(job.job_id, None, fence=Fence("w-1", leased.attempt))
    missed = [(r.seq, r.type) for r in store.read(job.stream) if present(r.seq) > enqueued]
    with server.stream(
        http, f"/jobs/{job.job_id}/events", reader, Last_Event_ID=str(enqueued)
    ) as sse:
        frames = sse.rest()
    assert (frames[0].event, frames[0].data) == ("job-refresh", "init")
    assert [(f.id, f.data) for f in frames[1:] if f.event == "job-refresh"] == missed
    assert frames[-1].event == "job" and json.loads(frames[-1].data)["status"] == "completed"


def test_a_terminal_job_shows_its_state_once_then_ends(server, http, reader):
    job = enqueue()
    queue.cancel(job.job_id, reason="not needed")
    with server.stream(http, f"/jobs/{job.job_id}/events", reader) as sse:
        frames = sse.rest()
    assert [f.event for f in frames] == ["job-refresh", "job"]
    assert json.loads(frames[1].data)["status"] == "canceled"
