"""A staff session on the API gets what the user's Django permissions grant (issue 31).

A staff user with no model permissions is refused everywhere in the admin; through the
API it must be refused too. Each scope comes from a permission (docs/api.md has the
table), creating work in an organization's name needs an explicit grant, and only a
superuser holds every scope.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from access import principals, tokens
from tests.integration.api.conftest import api, issue, payload, written  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

CSRF = "c" * 32


def staff(*perms: str, superuser: bool = False) -> Client:
    """A logged-in browser of a staff user holding `perms` ("app.codename")."""
    users = get_user_model()
    name = f"op-{users.objects.count()}"
    if superuser:
        user = users.objects.create_superuser(name, password="pw")
    else:
        user = users.objects.create_user(name, password="pw", is_staff=True)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app, codename=codename)
        )
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies["csrftoken"] = CSRF
    return client


def post(client: Client, path: str, body: dict) -> tuple[int, dict]:
    response = client.post(path, body, content_type="application/json", HTTP_X_CSRFTOKEN=CSRF)
    return response.status_code, response.json()


def get(client: Client, path: str) -> tuple[int, object]:
    response = client.get(path)
    is_json = response.get("Content-Type", "").startswith("application/json")
    return response.status_code, response.json() if is_json else response.content


@pytest.fixture
def other_org_job(api) -> str:  # noqa: F811 (the api fixture)
    """A queued job of org-2, enqueued with an unbound token."""
    return api.enqueue(body={"payload": payload(org="org-2")})["job"]["id"]


def test_a_staff_user_without_permissions_is_refused_on_every_api_door(other_org_job):
    client = staff()
    for path in ("/jobs", f"/jobs/{other_org_job}", "/factory/api/objectives", "/metrics"):
        status, out = get(client, path)
        assert status == 403, (path, out)
        assert isinstance(out, dict) and out["error"] == "missing_scope", (path, out)
    before = written()
    status, out = post(client, "/agents/factory/jobs", {"payload": payload(org="org-2")})
    assert (status, out["error"]) == (403, "missing_scope")
    status, out = post(client, f"/jobs/{other_org_job}/abort", {"reason": "no"})
    assert (status, out["error"]) == (403, "missing_scope")
    assert written() == before


def test_view_job_reads_jobs_and_nothing_more(other_org_job):
    client = staff("jobs.view_job")
    assert get(client, "/jobs")[0] == 200
    assert get(client, f"/jobs/{other_org_job}")[0] == 200  # the admin shows it too
    assert get(client, "/factory/api/objectives")[0] == 403
    status, out = post(client, f"/jobs/{other_org_job}/abort", {})
    assert (status, out["error"]) == (403, "missing_scope")
    assert "jobs:control" in out["detail"]


def test_change_job_controls_jobs_as_the_admin_does(other_org_job):
    client = staff("jobs.view_job", "jobs.change_job")
    status, out = post(client, f"/jobs/{other_org_job}/abort", {"reason": "stuck"})
    assert status == 202, out
    assert out["canceled"] is True and out["command"]["by"].startswith("op-")


def test_add_job_alone_may_not_enqueue_in_an_organizations_name():
    client = staff("jobs.view_job", "jobs.add_job")
    before = written()
    status, out = post(client, "/agents/factory/jobs", {"payload": payload(org="org-2")})
    assert (status, out["error"]) == (403, "missing_scope")
    assert "jobs:write" in out["detail"]
    assert written() == before


def test_enqueue_needs_add_job_and_the_explicit_organization_grant():
    client = staff("jobs.add_job", "access.enqueue_for_any_organization")
    status, out = post(client, "/agents/factory/jobs", {"payload": payload(org="org-2")})
    assert status == 202, out
    assert out["job"]["organizationId"] == "org-2"


def test_view_objective_summary_reads_the_objectives_api():
    client = staff("objectives.view_objectivesummary")
    assert get(client, "/factory/api/objectives")[0] == 200
    assert get(client, "/jobs")[0] == 403


def test_a_superuser_holds_every_scope(other_org_job):
    client = staff(superuser=True)
    assert get(client, "/jobs")[0] == 200
    assert get(client, "/factory/api/objectives")[0] == 200
    status, _ = post(client, "/agents/factory/jobs", {"payload": payload(org="org-3")})
    assert status == 202
    assert post(client, f"/jobs/{other_org_job}/abort", {})[0] == 202


def test_the_mapping_in_one_place():
    users = get_user_model()
    plain = users.objects.create_user("plain", password="pw", is_staff=True)
    assert principals.session_scopes(plain) == frozenset()
    boss = users.objects.create_superuser("boss", password="pw")
    assert principals.session_scopes(boss) == frozenset(tokens.SCOPES)
    # every scope a permission can grant is a real scope, and each names real permissions
    for scope, needs in principals.SCOPE_PERMISSIONS.items():
        assert scope in tokens.SCOPES
        for perm in needs:
            app, codename = perm.split(".")
            assert Permission.objects.filter(
                content_type__app_label=app, codename=codename
            ).exists(), perm


def test_a_session_loses_a_scope_as_soon_as_the_permission_is_taken_away():
    client = staff("jobs.view_job")
    assert get(client, "/jobs")[0] == 200
    user = get_user_model().objects.get(username__startswith="op-")
    user.user_permissions.clear()
    assert get(client, "/jobs")[0] == 403  # permissions are read per request
