"""The job page's actions: repair actions behind a disclosure, settled jobs that the live
refresh leaves alone, and the actions swapped once more when a job settles."""

from __future__ import annotations

import re

import pytest

from jobs import queue
from tests.integration.admin.conftest import enqueue, grant, job_url, text

pytestmark = pytest.mark.django_db


def actions(page: str) -> str:
    return page.split('id="rcpt-job-actions"', 1)[1].split("</section>", 1)[0]


def repair(page: str) -> str:
    return page.split('<details class="rcpt-repair" id="rcpt-repair">', 1)[1].split(
        "</details>", 1
    )[0]


def test_repair_actions_sit_behind_a_closed_disclosure(admin_client):
    page = text(admin_client.get(job_url(enqueue())))
    part = actions(page)
    assert "<summary>Repair and verify</summary>" in part
    assert '<details class="rcpt-repair" id="rcpt-repair">' in part  # closed by default
    inside = repair(part)
    for form in ("rcpt-redrive-form", "rcpt-verify-form", "rcpt-replay-form"):
        assert f'id="{form}"' in inside
    outside = part.replace(inside, "")
    assert "rcpt-verify-form" not in outside and "rcpt-replay-form" not in outside
    assert 'id="rcpt-abort-form"' in outside  # the everyday action stays in view
    assert "Rebuild read model" in inside and "rcpt-danger" not in inside


def test_a_settled_job_has_no_redrive_and_no_live_refresh(admin_client):
    job_id = enqueue()
    assert queue.abort(job_id, reason="done", by="t").canceled
    page = text(admin_client.get(job_url(job_id)))
    assert 'data-terminal="1"' in page
    assert "settled: live refresh off" in page
    part = actions(page)
    assert 'id="rcpt-redrive-form"' not in part and 'id="rcpt-abort-form"' not in part
    assert 'id="rcpt-verify-form"' in repair(part)


def test_the_actions_section_is_swapped_when_the_job_settles(admin_client):
    page = text(admin_client.get(job_url(enqueue())))
    assert 'data-terminal="0"' in page
    assert '<section class="rcpt-job-actions" id="rcpt-job-actions" data-settle>' in page


def test_a_viewer_gets_no_disclosure_at_all(client, django_user_model):
    user = django_user_model.objects.create_user("look", password="x", is_staff=True)
    grant(user, "jobs", "view_job")
    client.force_login(user)
    page = text(client.get(job_url(enqueue())))
    assert 'id="rcpt-repair"' not in page
    assert "acting on it needs the “Can change job” permission" in page


def test_the_page_carries_no_requirement_ids(admin_client):
    page = text(admin_client.get(job_url(enqueue("factory", "factory.dispatch"))))
    body = page.split("<body", 1)[1]
    assert not re.findall(r"\b[A-Z]-\d+\b|SPEC \d", body)
