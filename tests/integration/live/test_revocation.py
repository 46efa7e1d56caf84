"""Open streams re-check their credential and end soon after it is revoked (issue 31).

A token revoked while it held `/receipt/stream` or `/jobs/<id>/events` open used to keep
receiving frames, full job data included, for as long as the client stayed. Now every
open stream's credential is re-read about once a second, and the stream ends when the
token is revoked, deleted or loses the scope, or when a session ends or loses
`jobs.view_job`. Revocations here are written with `QuerySet.update()` from the test
process: no signal reaches the server, the slowest path.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from access.models import ApiToken
from receipts import store
from tests.conftest import wait_for
from tests.integration.live.conftest import enqueue, token

pytestmark = pytest.mark.django_db(transaction=True)

# Generous for a loaded machine; the server checks about once a second. A stream that is
# never re-checked stays open far past it (the test server pings every 300 ms).
CLOSE_DEADLINE_S = 8.0


def revoke(secret: str) -> None:
    ApiToken.objects.filter(prefix=secret[:12]).update(revoked_at=timezone.now())


def assert_ends(sse, *, while_appending: str | None = None) -> None:
    """The server ends the stream before the deadline (frames in between are allowed)."""
    deadline = time.monotonic() + CLOSE_DEADLINE_S
    while sse.next() is not None:
        if while_appending is not None:  # keep news flowing: a closed stream gets none
            store.append(f"{while_appending}{uuid.uuid4().hex[:6]}", {"type": "t"})
        assert time.monotonic() < deadline, "the stream is still open after the revocation"
    assert sse.closed_by_server


@pytest.mark.parametrize("how", ["revoked", "deleted", "rescoped"])
def test_receipt_stream_ends_when_its_token_is_revoked(server, http, how):
    prefix = f"live-revoke/{uuid.uuid4().hex[:8]}/"
    secret = token(scopes=["jobs:read", "jobs:write"])
    with server.stream(http, f"/receipt/stream?prefix={prefix}", secret) as sse:
        assert sse.next().event == "ping"
        store.append(f"{prefix}before", {"type": "t"})
        sse.until(lambda f: f.event == "receipt-refresh", message="a receipt before")
        rows = ApiToken.objects.filter(prefix=secret[:12])
        if how == "revoked":
            revoke(secret)
        elif how == "deleted":
            rows.delete()
        else:
            rows.update(scopes=["jobs:write"])
        assert_ends(sse, while_appending=prefix)
    again = http.get(f"{server.url}/receipt/stream", headers={"Authorization": f"Bearer {secret}"})
    assert again.status_code in (401, 403)


def test_job_events_end_when_the_token_is_revoked(server, http):
    job = enqueue(org="org-1")
    secret = token(org="org-1", scopes=["jobs:read"])
    with server.stream(http, f"/jobs/{job.job_id}/events", secret) as sse:
        sse.until(lambda f: f.event == "job", message="the first job frame")
        revoke(secret)
        assert_ends(sse)
    again = http.get(
        f"{server.url}/jobs/{job.job_id}/events", headers={"Authorization": f"Bearer {secret}"}
    )
    assert (again.status_code, again.json()["error"]) == (401, "invalid_token")


def test_a_long_poll_answers_401_when_its_token_is_revoked(server, http):
    job = enqueue()
    secret = token(scopes=["jobs:read"])
    answer: list[httpx.Response | Exception] = []

    def long_poll() -> None:
        try:
            answer.append(
                httpx.get(
                    f"{server.url}/jobs/{job.job_id}/wait?timeoutMs=60000",
                    headers={"Authorization": f"Bearer {secret}"},
                    timeout=30,  # far below the poll's 60 s: a poll never re-checked times out
                )
            )
        except httpx.HTTPError as error:
            answer.append(error)

    poller = threading.Thread(target=long_poll)
    poller.start()
    try:
        # the server stamps the token's last use when it authenticates the poll
        wait_for(
            lambda: ApiToken.objects.filter(
                prefix=secret[:12], last_used_at__isnull=False
            ).exists(),
            timeout=10,
            message="the server to authenticate the long poll",
        )
        revoke(secret)
    finally:
        poller.join(timeout=40)
    [response] = answer
    assert isinstance(response, httpx.Response), f"the long poll was not answered: {response!r}"
    assert (response.status_code, response.json()["error"]) == (401, "invalid_token")


def staff_cookie(*perms: str) -> tuple[str, Any]:
    user = get_user_model().objects.create_user(
        f"op-{uuid.uuid4().hex[:6]}", password="x", is_staff=True
    )
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    browser = Client()
    browser.force_login(user)
    return browser.cookies["sessionid"].value, user


@pytest.mark.parametrize("how", ["logout", "permission"])
def test_a_session_stream_ends_with_the_session_or_its_permission(server, http, how):
    job = enqueue(org="org-9")
    key, user = staff_cookie("view_job")
    with server.stream(http, f"/jobs/{job.job_id}/events", Cookie=f"sessionid={key}") as sse:
        sse.until(lambda f: f.event == "job", message="the first job frame")
        if how == "logout":
            Session.objects.filter(session_key=key).delete()
        else:
            user.user_permissions.clear()
        assert_ends(sse)


def test_a_stream_whose_credential_stays_valid_stays_open(server, http):
    """The re-check must not end healthy streams: many keepalives pass, still open."""
    secret = token(scopes=["jobs:read"])
    with server.stream(http, "/receipt/stream", secret) as sse:
        pings = 0
        deadline = time.monotonic() + 3.0  # several re-check intervals
        while time.monotonic() < deadline:
            frame = sse.next()
            assert frame is not None, "a healthy stream was closed"
            pings += frame.event == "ping"
        assert pings >= 3
