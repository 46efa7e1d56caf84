"""The job page of a job of Django's task framework, beside Factory and without it: the
chat product's rows (lane, organization, objective) only where they say something, and
no steer or follow-up offered to a task function, which cannot read them."""

from __future__ import annotations

import re

import pytest

from jobs import queue
from jobs.core.state import Fence
from tests.integration.admin.conftest import NOW, enqueue, job_url, text, words
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db


def summary(response) -> str:
    return re.search(r'<dl class="rcpt-summary">(.*?)</dl>', text(response), re.S).group(1)


def labels(response) -> list[str]:
    return re.findall(r"<dt>(.*?)</dt>", summary(response))


def settle(job_id: str, *, failed: bool = False) -> None:
    queue.lease(job_id, worker_id="w:h:1", now_ms=NOW + 1000)
    fence = Fence("w:h:1", 1)
    if failed:
        assert queue.fail(job_id, "boom", fence=fence, no_retry=True, now_ms=NOW + 2000).applied
    else:
        assert queue.complete(job_id, 3, fence=fence, now_ms=NOW + 2000).applied


def help_line(response) -> str:
    return re.search(r"The job is \w+: [^.]*\.", words(response)).group(0)


def test_without_factory_a_task_jobs_summary_has_no_product_rows(admin_client, without_factory):
    response = admin_client.get(job_url(defs.add.enqueue(1, 2).id))
    shown = labels(response)
    assert "Task" in shown and "Kind" in shown
    for row in ("Lane", "Organization", "Objective / task"):
        assert row not in shown, row


def test_without_factory_another_jobs_lane_and_organization_stay(admin_client, without_factory):
    """An API enqueue may pick a lane and name an organization: those rows still say so."""
    shown = labels(admin_client.get(job_url(enqueue("acme-agent", "factory.run", lane="chat"))))
    assert "Lane" in shown and "Organization" in shown and "Objective / task" not in shown
    plain = queue.enqueue("acme-agent", {"kind": "django.task", "task": "x.y"}, now_ms=NOW)
    shown = labels(admin_client.get(job_url(plain.job.job_id)))
    assert "Organization" not in shown  # no organization named: no row to show a dash in


def test_beside_factory_every_row_stays(admin_client):
    for job_id in (defs.add.enqueue(1, 2).id, enqueue()):
        shown = labels(admin_client.get(job_url(job_id)))
        for row in ("Lane", "Organization", "Objective / task"):
            assert row in shown, (job_id, row)


def test_a_settled_job_without_an_objective_is_not_sent_to_one(admin_client, without_factory):
    done = defs.add.enqueue(1, 2).id
    settle(done)
    assert help_line(admin_client.get(job_url(done))).endswith(": abort no longer applies.")
    failed = defs.add.enqueue(1, 2).id
    settle(failed, failed=True)
    line = help_line(admin_client.get(job_url(failed)))
    assert line.endswith("; retry it to run it again.") and "objective" not in line


def test_a_settled_job_of_an_objective_continues_through_it(admin_client):
    made = queue.enqueue(
        "factory",
        {
            "kind": "factory.run",
            "objectiveId": "obj-9",
            "authContext": {"userId": "u", "organizationId": "o"},
        },
        now_ms=NOW,
    )
    settle(made.job.job_id, failed=True)
    line = help_line(admin_client.get(job_url(made.job.job_id)))
    assert line.endswith("; continue through its objective.")


def actions(response) -> str:
    return text(response).split('id="rcpt-job-actions"', 1)[1].split("</section>", 1)[0]


@pytest.mark.parametrize("factory", [True, False])
def test_a_task_job_is_offered_abort_but_no_steer_or_follow_up(admin_client, request, factory):
    if not factory:
        request.getfixturevalue("without_factory")
    response = admin_client.get(job_url(defs.add.enqueue(1, 2).id))
    part = actions(response)
    assert 'id="rcpt-abort-form"' in part
    assert 'id="rcpt-steer-form"' not in part and 'id="rcpt-follow-up-form"' not in part
    assert "A task function cannot read steer or follow-up commands" in words(response)
    assert "An abort is a receipt of the job itself" in words(response)
    assert "steer and follow-up are receipts" not in words(response)


def test_a_factory_job_keeps_its_steer_and_follow_up_forms(admin_client):
    response = admin_client.get(job_url(enqueue()))
    part = actions(response)
    for form in ("rcpt-abort-form", "rcpt-steer-form", "rcpt-follow-up-form"):
        assert f'id="{form}"' in part, form
    assert 'id="rcpt-no-commands"' not in part
    assert "Abort, steer and follow-up are receipts of the job itself" in words(response)
    done = enqueue()
    settle(done)
    assert help_line(admin_client.get(job_url(done))).endswith(
        ": abort, steer and follow-up no longer apply."
    )
