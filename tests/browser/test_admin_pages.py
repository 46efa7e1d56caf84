"""C-5: the admin pages in a real browser: changelist and filters, the job page (timeline,
time travel, Abort), the streams browser, the dashboard and an objective's DAG picture."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote
from playwright.sync_api import Page, expect

from jobs import queue
from objectives.core import vocabulary as v
from receipts import store
from tests.integration.objectives.conftest import create, diamond, drain

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AUTH = {"userId": "u-1", "organizationId": "org-1"}
JOB_SHOT = "/tmp/receipt-job.png"
OBJECTIVE_SHOT = "/tmp/receipt-objective.png"


def enqueue(**extra) -> str:
    body = {"kind": "factory.dispatch", "action": "noop", "authContext": AUTH, **extra}
    return queue.enqueue("factory", body).job.job_id


def status_filter(page: Page, status: str) -> None:
    page.locator("#changelist-filter").get_by_role("link", name=status, exact=True).click()
    expect(page).to_have_url(re.compile(rf"[?&]status={status}(&|$)"))


def test_changelist_lists_jobs_and_filters_by_status(page: Page):
    waiting = enqueue()
    gone = enqueue()
    assert queue.abort(gone, reason="setup", by="test").canceled
    page.locator('#content-main a[href="/admin/jobs/job/"]').first.click()
    results = page.locator("#result_list")
    expect(results).to_contain_text(waiting)
    expect(results).to_contain_text(gone)
    status_filter(page, "queued")
    expect(results).to_contain_text(waiting)
    expect(results).not_to_contain_text(gone)
    status_filter(page, "canceled")
    expect(results).to_contain_text(gone)
    expect(results).not_to_contain_text(waiting)


def test_job_page_timeline_time_travel_and_abort(page: Page, admin_user):
    job_id = enqueue()
    page.goto("/admin/jobs/job/")
    page.locator("#result_list").get_by_role("link", name=job_id).first.click()
    expect(page.locator("h1")).to_contain_text(job_id)
    rows = page.locator("#rcpt-receipts tbody tr.rcpt-row")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".rcpt-badge-ok")).to_have_attribute("title", "verified")
    expect(rows.first.locator(".rcpt-type")).to_have_text("job.enqueued")
    # The live refresh has joined the stream and finished its first fetch.
    expect(page.locator("#rcpt-live-status")).to_have_text("live")
    expect(page.locator("#rcpt-job")).not_to_have_attribute("aria-busy", "true")

    rows.first.get_by_role("link", name="state here").click()
    state = page.locator("#state")
    expect(state.locator("h2")).to_have_text("State at receipt 1 of 1")
    expect(state.locator("#rcpt-state-json")).to_contain_text(job_id)
    expect(state).to_contain_text("Status then: queued")

    form = page.locator("#rcpt-abort-form")
    form.locator("input[name=reason]").fill("browser says stop")
    form.get_by_role("button").click()
    expect(page.locator(".messagelist")).to_contain_text("Job canceled (it was queued).")
    expect(page.locator("#rcpt-job-status")).to_contain_text("canceled")
    expect(rows).to_have_count(2)
    expect(page.locator("#rcpt-receipts .rcpt-badge-ok")).to_have_count(2)
    page.screenshot(path=JOB_SHOT, full_page=True)

    job = queue.get(job_id)
    assert job.status == "canceled"
    last = store.read(f"jobs/{job_id}")[-1]
    assert last.body.get("by") == admin_user.username, last.body
    assert "browser says stop" in str(last.body)


def test_streams_browser_lists_the_job_stream_and_verifies_it(page: Page):
    job_id = enqueue()
    page.goto("/admin/receipts/stream/")
    page.get_by_role("textbox").first.fill("jobs/")
    page.keyboard.press("Enter")
    link = page.get_by_role("link", name=f"jobs/{job_id}", exact=True)
    expect(link).to_be_visible()
    link.click()
    expect(page.locator("h1")).to_have_text(f"jobs/{job_id}")
    page.get_by_role("button", name="Verify chain").click()
    verdict = page.locator("#rcpt-verification")
    expect(verdict).to_have_class(re.compile(r"\brcpt-ok\b"))
    expect(verdict).to_contain_text("Chain verified. ok: 1 receipts")


def test_dashboard_renders_its_tables(page: Page):
    enqueue()
    page.goto("/admin/jobs/job/")
    page.get_by_role("link", name=re.compile("dashboard", re.I)).first.click()
    expect(page).to_have_url(re.compile(r"/admin/jobs/job/dashboard/$"))
    tables = page.locator("table.rcpt-table[data-source]")
    expect(tables.first).to_be_visible()
    assert tables.count() >= 2
    for i in range(tables.count()):
        table = tables.nth(i)
        expect(table.locator("thead th").first).to_be_visible()
        assert table.locator("tbody tr").count() >= 1  # a row or the "empty" row


def test_objective_page_draws_one_svg_node_per_task(page: Page):
    oid = create(title="Browser diamond", tasks=diamond())
    drain()  # plan and run the four tasks (command `true`) with the in-process stand-in worker
    page.goto("/admin/objectives/objectivesummary/")
    page.get_by_role("link", name="Browser diamond").first.click()
    expect(page.locator("h1")).to_have_text("Browser diamond")
    svg = page.locator("svg.rcpt-dag")
    expect(svg).to_be_visible()
    expect(svg.locator(".rcpt-dag-node")).to_have_count(4)
    expect(svg.locator(".rcpt-dag-edge")).to_have_count(4)
    box = svg.bounding_box()
    assert box and box["width"] > 50 and box["height"] > 50, box
    page.screenshot(path=OBJECTIVE_SHOT, full_page=True)
    job = v.task_job_id(oid, "d", 1)
    expect(svg.locator(f'a[href="/admin/jobs/job/{quote(job)}/change/"]')).to_have_count(1)
