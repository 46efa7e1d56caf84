"""D-8 in the admin: the job page lists the job's callback records; the dashboard counts
the records of every process."""

from __future__ import annotations

import dataclasses
import re

import pytest

from jobs import dashboard, queue
from jobs.runtime import callbacks
from tests.integration.admin.conftest import NOW, enqueue, job_url, text

pytestmark = pytest.mark.django_db
URL = "http://127.0.0.1:9/hook/s3cr3t"  # port 9: nothing answers


@pytest.fixture
def hooked(settings):
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT,
        resonate_callback_url=None,
        event_callback_url=URL,
        callback_token="tok-secret",
    )


def section(page: str) -> str:
    return re.search(r'<section id="rcpt-callbacks" data-live>(.*?)</section>', page, re.S).group(1)


def test_the_job_page_lists_each_callback_with_its_last_answer(admin_client, hooked):
    job_id = enqueue()
    queue.command(job_id, "abort", reason="stop", now_ms=NOW + 5)
    callbacks.deliver_due(now_ms=NOW + 10)  # refused
    page = text(admin_client.get(job_url(job_id)))
    callbacks_html = section(page)
    assert 'id="rcpt-callbacks-table"' in callbacks_html
    assert '<span class="rcpt-type">canceled</span>' in callbacks_html
    assert '<span class="rcpt-promise rcpt-promise-pending">pending</span>' in callbacks_html
    assert '<td class="rcpt-num">1</td>' in callbacks_html
    assert "<code>http://127.0.0.1:9/••••</code>" in callbacks_html
    assert f'"jobId": "{job_id}"' in callbacks_html
    assert "s3cr3t" not in page and "tok-secret" not in page
    assert "web process" not in page


def test_a_job_without_callbacks_says_so(admin_client):
    page = text(admin_client.get(job_url(enqueue())))
    assert "No callback was recorded for this job." in section(page)


def test_the_dashboard_counts_the_records(admin_client, hooked, monkeypatch):
    monkeypatch.setattr(dashboard, "wall_clock_ms", lambda: NOW + 100)
    for n in range(3):
        queue.command(enqueue(job_id=f"dash-cb-{n}"), "abort", now_ms=NOW + n)
    page = text(admin_client.get("/admin/jobs/job/dashboard/"))
    assert re.search(r'id="rcpt-callbacks-pending">3</strong>', page)
    assert re.search(r'id="rcpt-callbacks-gave-up">0</strong>', page)
    assert 'data-field="callbacks.records.byEvent.canceled.pending" data-format="num">3<' in page
    data = admin_client.get("/admin/jobs/job/dashboard.json").json()
    assert data["callbacks"]["records"]["pending"] == 3
    assert "failuresThisProcess" not in data["callbacks"]
