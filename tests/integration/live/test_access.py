"""A-10, Q-2 on the live endpoints: 401 / 403 / 404 with JSON bodies, organization isolation."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from tests.integration.live.conftest import enqueue, token

pytestmark = pytest.mark.django_db(transaction=True)

PATHS = ["/jobs/{job}/events", "/jobs/{job}/wait?timeoutMs=0", "/receipt/stream"]


def get(server, http, path: str, secret: str | None = None, **headers: str):
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    return http.get(server.url + path, headers=headers)


def assert_error(response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["ok"] is False and body["error"] == code and body["detail"]


def test_no_credentials_is_401_not_authenticated(server, http):
    job = enqueue()
    for path in PATHS:
        response = get(server, http, path.format(job=job.job_id))
        assert_error(response, 401, "not_authenticated")
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_an_unknown_token_is_401_invalid_token(server, http):
    job = enqueue()
    for path in PATHS:
        assert_error(
            get(server, http, path.format(job=job.job_id), "rcpt_not-a-real-token"),
            401,
            "invalid_token",
        )


def test_a_token_without_jobs_read_is_403_missing_scope(server, http):
    job, writer = enqueue(), token(scopes=["jobs:write"])
    for path in PATHS:
        assert_error(get(server, http, path.format(job=job.job_id), writer), 403, "missing_scope")


def test_another_organizations_job_is_404_like_a_missing_one(server, http):
    job = enqueue(org="org-1")
    outsider, anyone = token(org="org-2", scopes=["jobs:read"]), token()
    for path in PATHS[:2]:
        assert_error(get(server, http, path.format(job=job.job_id), outsider), 404, "job_not_found")
        assert_error(
            get(server, http, path.format(job="no-such-job"), anyone), 404, "job_not_found"
        )


def test_the_own_organization_may_follow_its_job(server, http):
    job = enqueue(org="org-1")
    insider = token(org="org-1", scopes=["jobs:read"])
    with server.stream(http, f"/jobs/{job.job_id}/events", insider) as sse:
        assert sse.response.status_code == 200
        assert sse.next().data == "init"
    assert get(server, http, f"/jobs/{job.job_id}/wait?timeoutMs=0", insider).status_code == 200


def test_a_bad_last_event_id_is_400_and_other_methods_405(server, http, reader):
    assert_error(
        get(server, http, "/receipt/stream", reader, **{"Last-Event-ID": "abc"}),
        400,
        "invalid_last_event_id",
    )
    response = http.post(
        f"{server.url}/receipt/stream", headers={"Authorization": f"Bearer {reader}"}
    )
    assert_error(response, 405, "method_not_allowed")


def test_a_staff_session_may_follow_a_job(server, http):
    """The admin job page follows its job with the operator's session cookie (U-2)."""
    staff = get_user_model().objects.create_user("operator", password="x", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    browser = Client()
    browser.force_login(staff)
    job = enqueue(org="org-9")
    with server.stream(
        http, f"/jobs/{job.job_id}/events", Cookie=f"sessionid={browser.cookies['sessionid'].value}"
    ) as sse:
        assert sse.response.status_code == 200
        assert sse.next().data == "init"


def test_a_staff_session_without_view_job_may_not_follow(server, http):
    """The API grants a session what the admin does: no view_job, no jobs:read."""
    staff = get_user_model().objects.create_user("nobody", password="x", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    job = enqueue(org="org-9")
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    for path in PATHS:
        assert_error(
            get(server, http, path.format(job=job.job_id), Cookie=cookie), 403, "missing_scope"
        )
