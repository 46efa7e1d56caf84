"""Resuming with `Last-Event-ID` from before the server's feed started (issue 31).

Such a resume reads the missed receipts from the database, not from the feed's ring, with
the caller's filter: for an organization-bound token, the organization filter. On SQLite
that filter once made the read fail (`malformed JSON`): the stream sent one ping and then
nothing. Each test writes its history first and starts its own server afterwards, so the
resume has to read the database.
"""

from __future__ import annotations

import json
import uuid

import pytest

from jobs import queue
from receipts import store
from tests.integration.live.conftest import enqueue, serve, token
from tests.support import present

pytestmark = pytest.mark.django_db(transaction=True)


def test_receipt_stream_resumes_for_an_organization_bound_token(http, tmp_path):
    prefix = f"live-resume/{uuid.uuid4().hex[:8]}/"
    first = store.append(f"{prefix}a", {"type": "t"}, context={"organizationId": "org-1"})[0]
    store.append(f"{prefix}theirs", {"type": "t"}, context={"organizationId": "org-2"})
    store.append(f"{prefix}nobody", {"type": "t"})
    missed = store.append(f"{prefix}b", {"type": "t"}, context={"organizationId": "org-1"})[0]
    org_token = token(org="org-1", scopes=["jobs:read"])
    with serve(tmp_path) as server:
        with server.stream(
            http,
            f"/receipt/stream?prefix={prefix}",
            org_token,
            Last_Event_ID=str(present(first.seq)),
        ) as sse:
            assert sse.response.status_code == 200
            got = sse.until(lambda f: f.event == "receipt-refresh", message="the missed receipt")
            assert [(f.id, f.data) for f in got if f.event == "receipt-refresh"] == [
                (missed.seq, missed.stream)
            ]
            live = store.append(f"{prefix}c", {"type": "t"}, context={"organizationId": "org-1"})
            got = sse.until(lambda f: f.event == "receipt-refresh", message="a live receipt")
            assert [(f.id, f.data) for f in got if f.event == "receipt-refresh"] == [
                (live[0].seq, live[0].stream)
            ]
        assert "malformed JSON" not in server.tail()


def test_job_events_resume_for_an_organization_bound_token(http, tmp_path):
    job = enqueue(org="org-1")
    enqueued = present(store.read(job.stream)[-1].seq)
    queue.lease(job.job_id, worker_id="w-1")
    leased = present(store.read(job.stream)[-1].seq)
    org_token = token(org="org-1", scopes=["jobs:read"])
    with serve(tmp_path) as server:
        with server.stream(
            http, f"/jobs/{job.job_id}/events", org_token, Last_Event_ID=str(enqueued)
        ) as sse:
            assert sse.response.status_code == 200
            frames = sse.until(lambda f: f.event == "job" and f.id is None, message="a job frame")
            frames += sse.until(lambda f: f.event == "job", message="the frame after resume")
        assert "malformed JSON" not in server.tail()
    refreshes = [(f.id, f.data) for f in frames if f.event == "job-refresh"]
    assert refreshes[0][1] == "init"
    assert (leased, "job.leased") in refreshes
    assert json.loads(frames[-1].data)["status"] == "leased"
