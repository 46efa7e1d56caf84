"""A-10, Q-1: who may call what; one JSON error shape everywhere (SPEC 9); A-11 schema/docs."""

from __future__ import annotations

import logging
import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, RequestFactory
from django.utils import timezone

from access.models import ApiToken
from receipt_site import api_errors
from tests.integration.api.conftest import Api, payload, written

pytestmark = pytest.mark.django_db

JOB_PATHS = ["/jobs", "/jobs/j-1", "/jobs/j-1/receipts", "/jobs/j-1/state"]
POST_PATHS = ["/agents/factory/jobs", "/jobs/j-1/steer", "/jobs/j-1/follow-up", "/jobs/j-1/abort"]


@pytest.mark.parametrize("path", [*JOB_PATHS, "/api/schema/"])
def test_reads_without_credentials_are_401_with_a_bearer_challenge(anonymous, path):
    response = anonymous.client.get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="receipt"'
    assert response.json() == {
        "ok": False,
        "error": "not_authenticated",
        "detail": response.json()["detail"],
    }


@pytest.mark.parametrize("path", POST_PATHS)
def test_writes_without_credentials_are_401_and_write_nothing(anonymous, path):
    before = written()
    status, out = anonymous.post(path, {"payload": payload()})
    assert (status, out["error"]) == (401, "not_authenticated")
    assert written() == before


@pytest.mark.parametrize("header", ["Bearer rcpt_nope", "Bearer nope", "Basic dTpw", "Bearer "])
def test_bad_credentials_are_401_invalid_token(anonymous, header):
    response = anonymous.client.get("/jobs", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_token"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_revoked_token_is_refused(issue):
    secret = issue("old")
    ApiToken.objects.filter(name="old").update(revoked_at=timezone.now())
    status, out = Api(Client(), secret).get("/jobs")
    assert (status, out["error"]) == (401, "invalid_token")


def test_health_is_open(anonymous):
    assert anonymous.client.get("/healthz").status_code == 200
    assert anonymous.client.get("/readyz").status_code == 200


@pytest.mark.parametrize(
    ("scopes", "allowed"),
    [
        (["jobs:read"], {"read"}),
        (["jobs:write"], {"write"}),
        (["jobs:control"], {"control"}),
        (["objectives:read"], set()),
        (["jobs:read", "jobs:control"], {"read", "control"}),
    ],
)
def test_scopes_gate_each_endpoint(api, api_for, scopes, allowed):
    job_id = api.enqueue()["job"]["id"]
    caller = api_for("limited", scopes=scopes)
    calls = {
        "write": [lambda: caller.post("/agents/factory/jobs", {"payload": payload()})],
        "read": [
            lambda: caller.get("/jobs"),
            lambda: caller.get(f"/jobs/{job_id}"),
            lambda: caller.get(f"/jobs/{job_id}/receipts"),
            lambda: caller.get(f"/jobs/{job_id}/state"),
        ],
        "control": [
            lambda: caller.post(f"/jobs/{job_id}/steer", {"payload": {}}),
            lambda: caller.post(f"/jobs/{job_id}/follow-up", {"payload": {}}),
        ],
    }
    for group, group_calls in calls.items():
        for call in group_calls:
            before = written()
            status, out = call()
            if group in allowed:
                assert status in (200, 202), (group, out)
            else:
                assert (status, out["error"]) == (403, "missing_scope"), (group, out)
                assert written() == before
    status, out = caller.post(f"/jobs/{job_id}/abort", {})
    assert status == (202 if "control" in allowed else 403)


def test_missing_scope_wins_over_a_missing_job(api_for):
    status, out = api_for("reader", scopes=["jobs:read"]).post("/jobs/nope/abort", {})
    assert (status, out["error"]) == (403, "missing_scope")


@pytest.fixture
def staff_client():
    user = get_user_model().objects.create_user("op", password="pw", is_staff=True)
    grants = ("view_job", "add_job", "change_job", "enqueue_for_any_organization")
    user.user_permissions.add(*Permission.objects.filter(codename__in=grants))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_staff_session_reads_and_is_recorded_by_username(staff_client):
    response = staff_client.get("/jobs")
    assert response.status_code == 200
    staff_client.cookies["csrftoken"] = "a" * 32
    response = staff_client.post(
        "/agents/factory/jobs",
        {"payload": payload()},
        content_type="application/json",
        HTTP_X_CSRFTOKEN="a" * 32,
    )
    assert response.status_code == 202, response.content
    job_id = response.json()["job"]["id"]
    response = staff_client.post(
        f"/jobs/{job_id}/steer",
        {"payload": {}, "by": "pager"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN="a" * 32,
    )
    assert response.json()["command"]["by"] == "op (pager)"


def test_staff_session_post_without_csrf_is_403_and_writes_nothing(staff_client):
    before = written()
    response = staff_client.post(
        "/agents/factory/jobs", {"payload": payload()}, content_type="application/json"
    )
    assert response.status_code == 403
    assert response.json()["error"] == "csrf_failed"
    assert written() == before


def test_non_staff_session_is_not_authenticated():
    user = get_user_model().objects.create_user("joe", password="pw")
    client = Client()
    client.force_login(user)
    response = client.get("/jobs")
    assert (response.status_code, response.json()["error"]) == (401, "not_authenticated")


# ---- error shape outside the happy paths ----------------------------------------------------


def test_unknown_api_urls_get_a_json_404(api):
    for path in ("/nowhere", "/jobs/", "/jobs/a/b/c", "/agents/x/jobs/extra"):
        status, out = api.get(path)
        assert (status, out["error"]) == (404, "not_found"), path


def test_admin_keeps_its_html_404(staff_client):
    response = staff_client.get("/admin/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_handler500_is_json_outside_the_admin():
    request = RequestFactory().get("/jobs")
    response = api_errors.handler500(request)
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert b'"internal_error"' in response.content


def test_method_not_allowed_is_json(api):
    response = api.client.delete("/jobs/x", **api.headers())
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"
    assert "GET" in response["Allow"]


def test_unexpected_errors_are_500_internal_error_without_the_message(api, monkeypatch, caplog):
    from jobs.api import views

    def explode(*args, **kwargs):
        raise RuntimeError("database password is hunter2")

    monkeypatch.setattr(views.selectors, "page", explode)
    with caplog.at_level(logging.ERROR, logger="receipt.http"):
        status, out = api.get("/jobs")
    assert (status, out["error"]) == (500, "internal_error")
    assert "hunter2" not in out["detail"]
    error_id = re.search(r"err-[0-9a-f]{12}", out["detail"]).group(0)
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "http.unhandled_error"]
    assert record.errorId == error_id and record.errorType == "RuntimeError"
    assert record.path == "/jobs"


# ---- A-11 --------------------------------------------------------------------------------------


def test_openapi_schema_describes_every_endpoint_with_bearer_security(api):
    response = api.client.get("/api/schema/", {"format": "json"}, **api.headers())
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) >= {
        "/agents/{agent_id}/jobs",
        "/jobs",
        "/jobs/{job_id}",
        "/jobs/{job_id}/receipts",
        "/jobs/{job_id}/state",
        "/jobs/{job_id}/steer",
        "/jobs/{job_id}/follow-up",
        "/jobs/{job_id}/abort",
    }
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    enqueue = schema["paths"]["/agents/{agent_id}/jobs"]["post"]
    assert {"202", "400", "401", "403", "413"} <= set(enqueue["responses"])
    error = enqueue["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
    assert error.endswith("/Error")
    status_filter = next(
        p for p in schema["paths"]["/jobs"]["get"]["parameters"] if p["name"] == "status"
    )
    assert "queued" in status_filter["schema"]["enum"]


def test_swagger_ui_uses_local_assets_only(api):
    response = api.client.get("/api/docs/", **api.headers())
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/static/") for a in assets), assets
    assert "cdn" not in html.lower() and "//unpkg" not in html
    for asset in assets:  # WhiteNoise serves them from the sidecar package
        served = api.client.get(asset)
        assert served.status_code == 200, asset
        served.close()


def test_docs_page_sends_a_browser_without_session_to_the_login(anonymous):
    response = anonymous.client.get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=/api/docs/")
