"""T-2: plain API requests over HTTP answer exactly as under Django's test client, under
uvicorn (ASGI) and under granian (WSGI, the production layout's API server).

The ASGI handler (jobs.live.asgi) runs non-live requests through the middleware chain in
sync mode, on a pooled request thread, and WhiteNoise behind an async-capable wrapper
(receipt_site.static_files). None of that may change a response: same status, same body,
same headers (security headers, WWW-Authenticate, cookies), static files included.

These tests enqueue through the server, which starts its dispatch thread (and that
thread's connection): they get a server of their own so the shared one keeps its
connection budget (test_fanout).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

import jobs
from tests.integration.live.conftest import AUTH, Server, serve, token

pytestmark = pytest.mark.django_db(transaction=True)

# Headers a server adds by itself, or that vary per response.
TRANSPORT_HEADERS = {"date", "server", "content-length", "transfer-encoding", "connection"}
BODY = {"kind": "factory.dispatch", "authContext": AUTH}


@pytest.fixture(scope="module", params=["uvicorn", "granian"])
def server(request, django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Server]:
    wsgi = request.param == "granian"
    with django_db_blocker.unblock(), serve(tmp_path_factory.mktemp("t2"), wsgi=wsgi) as running:
        yield running


def _headers(items) -> dict[str, str]:
    return {k.lower(): v for k, v in items if k.lower() not in TRANSPORT_HEADERS}


def both(server, http, method: str, path: str, *, body: bytes | None = None, **headers: str):
    """(server response, test-client response) to the same request."""
    live = http.request(method, server.url + path, content=body, headers=headers)
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    if "HTTP_CONTENT_TYPE" in meta:
        meta["content_type"] = meta.pop("HTTP_CONTENT_TYPE")
    local = Client().generic(method, path, body or b"", **meta)
    return live, local


def test_an_enqueue_answers_the_same_over_http(server, http):
    secret = token(name="t2")
    live, local = both(
        server,
        http,
        "POST",
        "/agents/a-1/jobs",
        body=json.dumps(BODY).encode(),
        **{"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    assert live.status_code == local.status_code == 202
    assert _headers(live.headers.items()) == _headers(local.items())
    live_body, local_body = live.json(), local.json()
    assert live_body.keys() == local_body.keys() and live_body["job"]["agentId"] == "a-1"
    assert live_body["job"].keys() == local_body["job"].keys()


@pytest.mark.parametrize(
    ("method", "path", "body", "headers"),
    [
        ("POST", "/agents/a-1/jobs", b"{}", {"Authorization": "Bearer rcpt_nope"}),
        ("POST", "/agents/a-1/jobs", b"{}", {}),
        ("POST", "/agents/a-1/jobs", b"{nope", {"Content-Type": "application/json"}),
        ("GET", "/no/such/route", None, {}),
        ("GET", "/jobs/missing-job", None, {}),
    ],
)
def test_refusals_are_identical_over_http(server, http, method, path, body, headers):
    if "Authorization" not in headers and path != "/no/such/route":
        headers = {**headers, "Authorization": f"Bearer {token(name='t2-refusals')}"}
    live, local = both(server, http, method, path, body=body, **headers)
    assert live.status_code == local.status_code >= 400
    assert live.json() == local.json()
    assert _headers(live.headers.items()) == _headers(local.items())


def test_static_files_are_still_served_by_whitenoise(server, http):
    path = "/static/receipt/jobs.css"
    response = http.get(server.url + path)
    assert response.status_code == 200
    assert response.content == (Path(jobs.__file__).parent / "static/receipt/jobs.css").read_bytes()
    assert response.headers["content-type"].startswith("text/css")
    assert http.get(server.url + "/static/receipt/no-such.css").status_code == 404


def test_the_admin_keeps_its_session_and_csrf_middleware(server, http):
    response = http.get(server.url + "/admin/login/")
    assert response.status_code == 200
    assert "csrftoken" in response.cookies
    assert response.headers["x-frame-options"] == "DENY"
