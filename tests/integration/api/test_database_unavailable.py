"""C-8: while the database cannot be reached, every answer says so: the API 503
`database_unavailable` with Retry-After (DRF views, plain views, live views), the admin a
plain "database unavailable" page, never a 500. The same outage on a real PostgreSQL that
is stopped and started again: tests/runtime/test_database_outage.py."""

from __future__ import annotations

import logging

import pytest
from asgiref.sync import async_to_sync
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError
from django.test import AsyncClient, RequestFactory

from access import principals
from receipt_site import api_errors, health
from tests.integration.api.conftest import payload, written

pytestmark = pytest.mark.django_db

REFUSED = (
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused'
)


def unreachable(*args, **kwargs):
    raise OperationalError(REFUSED)


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.content[:500]
    assert int(response["Retry-After"]) > 0
    body = response.json()
    assert body["ok"] is False and body["error"] == "database_unavailable"
    assert "database" in body["detail"] and "5432" not in body["detail"]


@pytest.fixture
def outage(monkeypatch):
    """Every credential lookup fails the way a stopped PostgreSQL fails it."""
    monkeypatch.setattr(principals, "principal_for_token", unreachable)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/agents/factory/jobs"),
        ("get", "/jobs"),
        ("get", "/jobs/j-1"),
        ("post", "/jobs/j-1/abort"),
        ("get", "/factory/api/objectives"),
        ("get", "/metrics"),  # a plain Django view
        ("get", "/jobs/j-1/wait"),  # a live (async) view
    ],
)
def test_api_answers_503_database_unavailable_with_retry_after(api, outage, method, path):
    before = written()
    call = getattr(api.client, method)
    extra = {"data": {"payload": payload()}, "content_type": "application/json"}
    response = call(path, **(extra if method == "post" else {}), **api.headers())
    assert_unavailable(response)
    assert written() == before


def test_live_streams_answer_503_database_unavailable(api, outage):
    headers = {"Authorization": f"Bearer {api.token}"}
    response = async_to_sync(AsyncClient().get)("/receipt/stream", headers=headers)
    assert_unavailable(response)


def test_an_outage_inside_a_view_is_503_too(api, monkeypatch, caplog):
    """Past authentication: the view's own reads fail the same way."""
    from jobs.api import views

    monkeypatch.setattr(views.selectors, "page", unreachable)
    with caplog.at_level(logging.WARNING, logger="receipt.http"):
        response = api.client.get("/jobs", **api.headers())
    assert_unavailable(response)
    [record] = [
        r for r in caplog.records if getattr(r, "event", None) == "http.database_unavailable"
    ]
    assert record.levelno == logging.WARNING and record.path == "/jobs"
    assert "http.unhandled_error" not in [getattr(r, "event", None) for r in caplog.records]


def test_sqlite_busy_past_its_timeout_is_503(api, monkeypatch):
    def locked(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(principals, "principal_for_token", locked)
    assert_unavailable(api.client.get("/jobs", **api.headers()))


def test_other_database_errors_stay_500_internal_error(api, monkeypatch):
    def broken(*args, **kwargs):
        raise OperationalError("no such table: jobs_job")

    monkeypatch.setattr(principals, "principal_for_token", broken)
    response = api.client.get("/jobs", **api.headers())
    assert (response.status_code, response.json()["error"]) == (500, "internal_error")
    assert "Retry-After" not in response


def test_the_admin_shows_a_plain_database_unavailable_page(admin_client, monkeypatch):
    monkeypatch.setattr(SessionStore, "load", unreachable)
    for page in ("/admin/", "/admin/jobs/job/", "/admin/jobs/job/dashboard/"):
        response = admin_client.get(page)
        assert response.status_code == 503, page
        assert response["Content-Type"].startswith("text/html")
        assert int(response["Retry-After"]) > 0
        text = response.content.decode()
        assert "Database unavailable" in text and "5432" not in text


def test_an_outage_raised_outside_any_view_is_503(monkeypatch):
    """Middleware (a session saved after the view) fails past every view's handler: the
    last-resort handler still answers 503, JSON for the API and HTML for the admin."""
    for path, kind in (("/jobs", "application/json"), ("/admin/", "text/html")):
        request = RequestFactory().get(path)
        try:
            unreachable()
        except OperationalError:
            response = api_errors.handler500(request)
        assert response.status_code == 503 and response["Content-Type"].startswith(kind)
        assert int(response["Retry-After"]) > 0


def test_health_says_the_database_is_unavailable(anonymous, api, monkeypatch):
    monkeypatch.setattr(health, "_ping", unreachable)
    ready = anonymous.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["ok"] is False
    for client in (anonymous, api):
        response = client.client.get("/healthz", **client.headers())
        assert response.status_code == 200
        out = response.json()
        assert (out["ready"], out["degraded"], out["database"]["ok"]) == (False, True, False)
        assert any("database unavailable" in warning for warning in out["warnings"])
        assert out["queue"]["total"] is None and out["detail"] is False
