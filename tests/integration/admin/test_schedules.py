"""Issue 34 item 1: the Schedules page lists each schedule with its next run, last run and
last outcome (a link to the job), and pause, resume and run now act on the selected
schedules with `by = <username>`; a viewer sees the list and acts on nothing."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote

from jobs import schedules
from jobs.core import contracts
from jobs.core.schedules import Schedule, tick_job_id
from jobs.models import Job
from receipts import store
from tests.integration.admin.conftest import NOW, grant, job_url, payload, text, words

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]
LIST = "/admin/jobs/schedule/"
MINUTE = 60_000
DECLARED_AT = NOW - NOW % MINUTE + 30_000  # half a minute past


def declare(*names: str) -> None:
    items = [(Schedule(n, "factory", payload(), cron="* * * * *"), "settings") for n in names]
    assert schedules.sync(items, now_ms=DECLARED_AT).errors == []


def post(client, action: str, *names: str):
    return client.post(LIST, {"action": action, ACTION_CHECKBOX_NAME: list(names)}, follow=True)


def by_of_last(name: str) -> tuple[str, str]:
    last = store.read(f"schedules/{name}")[-1]
    return last.type, last.body["by"]


def test_the_list_shows_next_run_last_run_and_the_last_outcome_as_a_link_to_its_job(
    admin_client,
):
    declare("nightly", "pulse")
    tick = DECLARED_AT + 30_000
    schedules.fire_due(now_ms=tick + 1_000)
    page = admin_client.get(LIST)
    assert page.status_code == 200
    shown = words(page)
    for column in ("next run", "last run", "last outcome"):
        assert column.upper() in shown.upper()
    assert "cron * * * * * (UTC)" in shown
    job_id = tick_job_id("pulse", tick)
    assert f'href="{job_url(job_id)}"' in text(page)  # the outcome links to the job
    assert "queued" in shown
    assert 'href="/admin/receipts/stream/schedules' in text(page)  # the name: its stream
    assert admin_client.get(f"{LIST}pulse/change/")["Location"].endswith(
        "/admin/receipts/stream/schedules_2Fpulse/change/"
    )


def test_a_name_the_admin_quotes_leads_to_its_own_stream(admin_client):
    declare("nightly_backup")  # `_` is `_5F` in the admin's URL
    response = admin_client.get(f"{LIST}{quote('nightly_backup')}/change/")
    assert response["Location"].endswith(
        f"/admin/receipts/stream/{quote('schedules/nightly_backup')}/change/"
    )


def test_pause_resume_and_run_now_are_recorded_with_the_admin_as_by(admin_client):
    declare("nightly", "pulse")
    response = post(admin_client, "pause_selected", "nightly", "pulse")
    assert "Paused: nightly, pulse." in words(response)
    assert by_of_last("nightly") == by_of_last("pulse") == ("schedule.paused", "admin")
    assert "paused by admin" in words(admin_client.get(LIST))
    response = post(admin_client, "run_now_selected", "pulse")
    assert "Run now: pulse (sched-pulse-now-3)." in words(response)
    assert by_of_last("pulse") == ("schedule.run_now", "admin")
    assert Job.objects.filter(pk="sched-pulse-now-3", status="queued").exists()
    response = post(admin_client, "resume_selected", "pulse")
    assert "Resumed: pulse (next run " in words(response)
    assert by_of_last("pulse") == ("schedule.resumed", "admin")


def test_a_refused_run_now_says_why_and_writes_nothing(admin_client):
    contracts.register_kind("acme.sched", auth_context_required=False)
    try:
        items = [(Schedule("later", "factory", {"kind": "acme.sched"}, every_s=60), "code")]
        schedules.sync(items, now_ms=DECLARED_AT)
    finally:
        contracts.unregister_kind("acme.sched")
    response = post(admin_client, "run_now_selected", "later")
    assert "Refused: later (" in words(response) and "acme.sched" in words(response)
    assert [r.type for r in store.read("schedules/later")] == ["schedule.declared"]
    assert not Job.objects.filter(id__startswith="sched-later-").exists()


def test_a_viewer_sees_the_schedules_and_cannot_act(client, django_user_model):
    declare("pulse")
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    grant(user, "jobs", "view_schedule")
    client.force_login(user)
    page = client.get(LIST)
    assert page.status_code == 200 and "pulse" in words(page)
    assert "pause_selected" not in text(page)
    post(client, "pause_selected", "pulse")
    assert [r.type for r in store.read("schedules/pulse")] == ["schedule.declared"]


def test_staff_without_the_permission_is_refused(client, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="x", is_staff=True)
    client.force_login(user)
    assert client.get(LIST).status_code == 403
