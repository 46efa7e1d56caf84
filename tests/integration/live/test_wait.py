"""A-6 GET /jobs/<id>/wait: a long poll woken by the feed, deprecated in favour of E-1."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from jobs import queue
from jobs.core.state import Fence
from tests.integration.live.conftest import enqueue

pytestmark = pytest.mark.django_db(transaction=True)


def wait(server, secret: str, job_id: str, timeout_ms: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}/jobs/{job_id}/wait",
        params={"timeoutMs": timeout_ms},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=130,
    )


def assert_deprecated(response: httpx.Response, job_id: str) -> None:
    assert response.headers["deprecation"] == "true"
    assert response.headers["link"] == f'</jobs/{job_id}/events>; rel="successor-version"'


def test_wait_returns_once_the_job_settles(server, reader):
    job = enqueue()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(wait, server, reader, job.job_id, "60000")
        leased = queue.lease(job.job_id, worker_id="w-1").job
        queue.complete(job.job_id, {"done": True}, fence=Fence("w-1", leased.attempt))
        response = pending.result(timeout=30)  # long before its 60 s deadline
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["job"]["status"] == "completed"
    assert body["job"]["result"] == {"done": True}
    assert_deprecated(response, job.job_id)


def test_wait_returns_the_unsettled_job_at_the_deadline(server, reader):
    job = enqueue()
    started = time.monotonic()
    response = wait(server, reader, job.job_id, "300")
    assert time.monotonic() - started >= 0.3
    assert response.status_code == 200
    assert response.json()["job"]["status"] == "queued"
    assert_deprecated(response, job.job_id)


def test_a_timeout_that_is_not_an_integer_is_400_and_negative_ones_clamp_to_0(server, reader):
    job = enqueue()
    for value in ["soon", "1.5", "1e3", "0x10"]:
        response = wait(server, reader, job.job_id, value)
        assert response.status_code == 400, value
        assert response.json()["error"] == "invalid_timeout"
    response = wait(server, reader, job.job_id, "-5")  # clamped to 0: answers at once
    assert response.status_code == 200 and response.json()["job"]["status"] == "queued"
