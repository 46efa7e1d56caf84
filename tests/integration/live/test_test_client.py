"""The live views under Django's own test client (a WSGI-style handler, no uvicorn):
the long poll works, streams refuse cleanly instead of buffering forever."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs import queue
from tests.integration.live.conftest import enqueue, token

pytestmark = pytest.mark.django_db(transaction=True)


def client() -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token()}")


def test_wait_works_without_an_asgi_server():
    job = enqueue()
    web = client()
    queued = web.get(f"/jobs/{job.job_id}/wait", {"timeoutMs": "50"})
    assert queued.status_code == 200 and queued.json()["job"]["status"] == "queued"
    queue.cancel(job.job_id, reason="done")
    settled = web.get(f"/jobs/{job.job_id}/wait", {"timeoutMs": "5000"})
    assert settled.json()["job"]["status"] == "canceled"
    assert settled.headers["Deprecation"] == "true"


def test_streams_answer_501_outside_asgi():
    web, job = client(), enqueue()
    for path in (f"/jobs/{job.job_id}/events", "/receipt/stream"):
        response = web.get(path)
        assert response.status_code == 501
        assert response.json()["error"] == "asgi_required"
        # the command that serves this project's ASGI app, not always the standalone site's
        assert "python -m uvicorn receipt_site.asgi:application" in response.json()["detail"]


def test_the_501_names_a_host_projects_own_asgi_app(settings):
    """A project made by startproject names only its WSGI app; its asgi.py sits beside it."""
    del settings.ASGI_APPLICATION
    settings.WSGI_APPLICATION = "mysite.wsgi.application"
    response = client().get("/receipt/stream")
    assert response.status_code == 501
    assert "(python -m uvicorn mysite.asgi:application)" in response.json()["detail"]
