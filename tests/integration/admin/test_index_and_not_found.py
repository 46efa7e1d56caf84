"""The admin index's order and grouping, and the admin-styled 404 pages (JSON stays JSON
outside the admin)."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote

from tests.integration.admin.conftest import enqueue, grant, job_url, text, words

pytestmark = pytest.mark.django_db


def captions(html: str) -> list[str]:
    return re.findall(r'<caption>\s*<a href="[^"]*" class="section"[^>]*>([^<]+)</a>', html)


def apps(html: str) -> list[str]:
    return re.findall(r'<div class="app-(\w+) module', html)


def main_part(html: str) -> str:
    return html.split('id="content-main"', 1)[1].split('id="rcpt-internal-tables"', 1)[0]


def internal_part(html: str) -> str:
    return html.split('id="rcpt-internal-tables"', 1)[1].split("</section>", 1)[0]


def test_index_puts_dashboard_and_jobs_first_then_objectives(admin_client):
    html = text(admin_client.get("/admin/"))
    main = main_part(html)
    assert apps(main)[:2] == ["jobs", "objectives"]
    jobs = main.split("</table>", 1)[0]
    rows = re.findall(r'<th scope="row"[^>]*>\s*<a href="([^"]+)"', jobs)
    assert rows == [
        "/admin/jobs/job/dashboard/",
        "/admin/jobs/job/",
        "/admin/jobs/queue/",
        "/admin/jobs/schedule/",
    ]
    objectives = main.split("</table>", 2)[1]
    assert 'href="/admin/objectives/objectivesummary/"' in objectives
    for ledger in ("workflow", "signal", "activity", "activityattempt"):
        assert f'href="/admin/objectives/{ledger}/"' not in main
    assert 'href="/admin/receipts/stream/"' in main


def test_index_groups_the_internal_tables_below_a_plain_heading(admin_client):
    html = text(admin_client.get("/admin/"))
    internal = internal_part(html)
    assert "<h2>Internal tables</h2>" in internal
    assert captions(internal) == ["Objectives ledger", "Task queue (django-q)"]
    for ledger in ("workflow", "signal", "activity", "activityattempt"):
        assert f'href="/admin/objectives/{ledger}/"' in internal
    assert ">Activities</a>" in internal and "Activitys" not in html
    assert 'href="/admin/django_q/' in internal
    assert "django_q" not in main_part(html)


def test_an_objectives_app_page_still_lists_all_its_models(admin_client):
    html = text(admin_client.get("/admin/objectives/"))
    for model in ("objectivesummary", "workflow", "activity"):
        assert f'href="/admin/objectives/{model}/"' in html


def test_a_viewer_sees_only_what_they_may_view(client, django_user_model):
    user = django_user_model.objects.create_user("v", password="x", is_staff=True)
    grant(user, "jobs", "view_job")
    client.force_login(user)
    html = text(client.get("/admin/"))
    assert apps(main_part(html)) == ["jobs"]
    assert 'id="rcpt-internal-tables"' not in html
    assert 'href="/admin/jobs/job/dashboard/"' in html


@pytest.mark.parametrize(
    ("path", "message", "back", "back_text"),
    [
        (job_url("nope-123"), "Job nope-123 not found.", "/admin/jobs/job/", "Back to jobs"),
        (
            f"/admin/receipts/stream/{quote('jobs/nope-123')}/change/",
            "Stream 'jobs/nope-123' not found.",
            "/admin/receipts/stream/",
            "Back to streams",
        ),
        (
            f"/admin/objectives/objectivesummary/{quote('obj-nope')}/change/",
            "Objective obj-nope not found.",
            "/admin/objectives/objectivesummary/",
            "Back to objectives",
        ),
    ],
)
def test_a_mistyped_id_gets_an_admin_styled_not_found_page(
    admin_client, path, message, back, back_text
):
    response = admin_client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    html = text(response)
    assert '<div class="breadcrumbs">' in html and 'id="user-tools"' in html  # base_site
    assert "<h1>Not found</h1>" in html
    assert f'<p id="rcpt-not-found-message" class="rcpt-not-found-message">{message}</p>' in html
    assert f'<a href="{back}" id="rcpt-not-found-back">{back_text}</a>' in html
    breadcrumbs = html.split('<div class="breadcrumbs">', 1)[1].split("</div>", 1)[0]
    assert f'href="{back}"' in breadcrumbs and "Not found" in breadcrumbs


def test_a_posted_action_on_a_missing_job_is_the_same_page(admin_client):
    response = admin_client.post(job_url("nope-9"), {"action": "abort"})
    assert response.status_code == 404
    assert "Job nope-9 not found." in words(response)


def test_an_unknown_admin_path_is_an_html_page_without_a_list(admin_client):
    response = admin_client.get("/admin/jobs/nothing-here/")
    assert response.status_code == 404
    html = text(response)
    assert "<h1>Not found</h1>" in html and '<div class="breadcrumbs">' in html


def test_api_paths_keep_their_json_404(admin_client):
    enqueue()
    response = admin_client.get("/no/such/api/path")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def _crumbs(html: str) -> list[str]:
    part = html.split('<div class="breadcrumbs">', 1)[1].split("</div>", 1)[0]
    return re.split(r"\s*\u203a\s*", " ".join(re.sub(r"<[^>]+>", " ", part).split()))


def test_the_jobs_pages_say_jobs_once_in_their_breadcrumbs(admin_client):
    # The app and its list share the name: Home, Jobs, Jobs read as a stutter.
    job_id = enqueue()
    assert _crumbs(text(admin_client.get("/admin/jobs/job/"))) == ["Home", "Jobs"]
    assert _crumbs(text(admin_client.get(job_url(job_id)))) == ["Home", "Jobs", job_id]
