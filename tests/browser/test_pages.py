"""The operator console in a real browser at 1280 px: the admin index's order, the
admin-styled 404, the job page's live refresh ending at a terminal state and its repair
disclosure, and the objective page's confirmed cancel and plan form. Screenshots go to
/tmp/shots2/ for a person to look at."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from playwright.sync_api import Page, expect

from jobs import queue
from tests.integration.objectives.conftest import create, diamond, drain, objective

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/tmp/shots2")
AUTH = {"userId": "u-1", "organizationId": "org-1"}


def shot(tab: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def enqueue(kind: str = "factory.run") -> str:
    return queue.enqueue("factory", {"kind": kind, "authContext": AUTH}).job.job_id


def test_index_shows_dashboard_and_jobs_first_and_internal_tables_last(tab: Page):
    modules = tab.locator("#content-main div.module")
    expect(modules.first).to_have_class(re.compile(r"\bapp-jobs\b"))
    expect(modules.nth(1)).to_have_class(re.compile(r"\bapp-objectives\b"))
    first_rows = modules.first.locator("th[scope=row]")
    expect(first_rows.first).to_have_text("Dashboard")
    expect(first_rows.nth(1)).to_have_text("Jobs")
    internal = tab.locator("#rcpt-internal-tables")
    expect(internal.locator("h2")).to_have_text("Internal tables")
    expect(internal.get_by_role("link", name="Activities", exact=True)).to_be_visible()
    shot(tab, "index")
    first_rows.first.get_by_role("link").click()
    expect(tab).to_have_url(re.compile(r"/admin/jobs/job/dashboard/$"))


def test_a_mistyped_job_id_gets_a_styled_page_with_the_way_back(tab: Page):
    response = tab.goto("/admin/jobs/job/no-such-job/change/")
    assert response is not None and response.status == 404
    expect(tab.locator("h1")).to_have_text("Not found")
    expect(tab.locator("#rcpt-not-found-message")).to_have_text("Job no-such-job not found.")
    expect(tab.locator("div.breadcrumbs")).to_contain_text("Jobs")
    shot(tab, "not-found-job")
    tab.locator("#rcpt-not-found-back").click()
    expect(tab).to_have_url(re.compile(r"/admin/jobs/job/$"))
    tab.goto("/admin/objectives/objectivesummary/obj-typo/change/")
    expect(tab.locator("#rcpt-not-found-message")).to_have_text("Objective obj-typo not found.")
    expect(tab.locator("#rcpt-not-found-back")).to_have_text("Back to objectives")


def test_live_refresh_stops_cleanly_when_the_job_settles(tab: Page):
    job_id = enqueue()
    tab.goto(f"/admin/jobs/job/{job_id}/change/")
    status = tab.locator("#rcpt-live-status")
    expect(status).to_have_text("live")
    expect(tab.locator("#rcpt-abort-form")).to_be_visible()
    assert queue.abort(job_id, reason="browser test", by="test").canceled
    expect(tab.locator("#rcpt-job")).to_have_attribute("data-terminal", "1")
    expect(status).to_have_text("settled: live refresh off")
    expect(tab.locator("#rcpt-job-status")).to_contain_text("canceled")
    expect(tab.locator("#rcpt-abort-form")).to_have_count(0)  # the actions were swapped too
    expect(tab.locator("#rcpt-receipts tbody tr.rcpt-row")).to_have_count(2)
    shot(tab, "job-settled")


def test_repair_actions_open_from_the_disclosure(tab: Page):
    job_id = enqueue("factory.dispatch")
    tab.goto(f"/admin/jobs/job/{job_id}/change/")
    expect(tab.locator("#rcpt-group-note")).to_be_visible()
    expect(tab.locator("#rcpt-group-mismatch")).to_have_count(0)
    verify = tab.get_by_role("button", name="Verify chain")
    expect(verify).to_be_hidden()
    expect(tab.get_by_role("button", name="Rebuild read model")).to_be_hidden()
    shot(tab, "job-healthy")
    tab.locator("#rcpt-repair > summary").click()
    expect(verify).to_be_visible()
    shot(tab, "job-repair-open")
    verify.click()
    expect(tab.locator("#rcpt-verification")).to_have_class(re.compile(r"\brcpt-ok\b"))


def test_cancel_asks_first_and_then_hides_what_no_longer_applies(tab: Page):
    oid = create(title="Browser cancel", tasks=diamond())
    tab.goto(f"/admin/objectives/objectivesummary/{oid}/change/")
    shot(tab, "objective-running")
    answers: list[bool] = [False, True]
    asked: list[str] = []

    def on_dialog(dialog) -> None:
        asked.append(dialog.message)
        if answers.pop(0):
            dialog.accept()
        else:
            dialog.dismiss()

    tab.on("dialog", on_dialog)
    cancel = tab.get_by_role("button", name="Cancel objective")
    cancel.click()
    assert asked and asked[0].startswith(f"Cancel objective {oid}?")
    assert objective(oid).status != "canceled"  # dismissed: nothing was posted
    with tab.expect_navigation():
        cancel.click()
    expect(tab.locator(".messagelist")).to_contain_text(re.compile("cancel: recorded", re.I))
    expect(tab.locator("#rcpt-objective-status")).to_have_text("canceled")
    actions = tab.locator("#rcpt-objective-actions")
    expect(actions.get_by_role("button", name="Cancel objective")).to_have_count(0)
    expect(actions.get_by_role("button", name="React")).to_have_count(0)
    expect(actions.get_by_role("button", name="Promote")).to_have_count(0)
    shot(tab, "objective-canceled")


def test_a_blocked_objective_gets_its_plan_from_the_page(tab: Page):
    oid = create(title="Browser vague", prompt="make it better")
    drain()
    tab.goto(f"/admin/objectives/objectivesummary/{oid}/change/")
    form = tab.locator("#rcpt-plan-form")
    expect(form).to_be_visible()
    form.locator("textarea").fill('[{"id": "a", "title": "A"}]')
    form.get_by_role("button").click()
    error = tab.locator("#rcpt-plan-error")
    expect(error).to_contain_text("Plan rejected: task 'a' needs a command or a prompt.")
    expect(form.locator("textarea")).to_have_value('[{"id": "a", "title": "A"}]')
    shot(tab, "objective-plan-error")
    assert objective(oid).status == "blocked"
    plan = [{"id": "a", "title": "A", "command": "true"}]
    form.locator("textarea").fill(json.dumps(plan))
    form.get_by_role("button").click()
    expect(tab.locator(".messagelist")).to_contain_text(
        re.compile(r"plan: 1 task\(s\) given", re.I)
    )
    expect(tab.locator("#rcpt-plan-form")).to_have_count(0)
    assert objective(oid).input_tasks == plan


def test_a_finished_objective_reads_as_tables(tab: Page):
    oid = create(
        title="Browser checked",
        tasks=[{"id": "t1", "title": "One", "command": "true"}],
        checks=[{"name": "unit", "command": "echo fine"}],
    )
    drain()
    tab.goto(f"/admin/objectives/objectivesummary/{oid}/change/")
    expect(tab.locator("#rcpt-checks")).to_contain_text("passed")
    expect(tab.locator("#rcpt-audit")).to_contain_text("verified")
    expect(tab.locator("#rcpt-audit-json")).to_be_hidden()  # the raw JSON stays folded
    actions = tab.locator("#rcpt-objective-actions")
    expect(actions.get_by_role("button")).to_have_text(["Note", "Archive"])
    shot(tab, "objective-finished")
    tab.locator("#rcpt-tasks").get_by_role("link").first.click()
    expect(tab.locator("h1")).to_contain_text("Job")


def failed(kind: str = "factory.run") -> str:
    from jobs.core.state import Fence

    job_id = enqueue(kind)
    assert queue.lease(job_id, worker_id="chat:h:1").applied
    queue.fail(job_id, "model gateway timed out", fence=Fence("chat:h:1", 1), no_retry=True)
    return job_id


def test_failed_jobs_are_retried_from_the_list_after_a_confirmation(tab: Page):
    """Issue 34 item 3: filter the failed jobs, select them, confirm how many, retry."""
    ids = [failed() for _ in range(2)]
    tab.goto("/admin/jobs/job/?status=failed")
    tab.locator("#action-toggle").check()
    tab.locator("select[name=action]").select_option("retry_selected")
    tab.locator(".actions button[name=index]").click()
    expect(tab.locator("#rcpt-retry-count")).to_have_text("2 failed jobs are selected.")
    shot(tab, "retry-confirm")
    tab.fill("#rcpt-reason", "gateway is back")
    with tab.expect_navigation():
        tab.get_by_role("button", name="Retry jobs").click()
    expect(tab.locator(".messagelist")).to_contain_text("Retried 2 job(s) in 1 batch(es).")
    expect(tab.locator("#result_list")).to_have_count(0)  # none of them is failed now
    shot(tab, "retry-done")
    assert {queue.get(job_id).status for job_id in ids} == {"queued"}


def test_a_failed_job_page_retries_it_and_shows_the_retry(tab: Page):
    job_id = failed()
    tab.goto(f"/admin/jobs/job/{job_id}/change/")
    form = tab.locator("#rcpt-retry-form")
    form.locator("input[name=reason]").fill("try once more")
    with tab.expect_navigation():
        form.get_by_role("button", name="Retry").click()
    expect(tab.locator(".messagelist")).to_contain_text("Job retried (retry 1)")
    expect(tab.locator("#rcpt-retried")).to_contain_text("last retried by br-admin at")
    rows = tab.locator("#rcpt-receipts tbody tr.rcpt-row .rcpt-type")
    expect(rows.last).to_have_text("job.retried")
    shot(tab, "job-retried")


def test_a_job_waiting_out_its_backoff_shows_when_it_retries(tab: Page):
    """Issue 34 item 2: a failed attempt waiting for its retry policy's backoff is queued
    with its retry time: the list's row, the job page's Backoff and its diagnosis say so."""
    from jobs.core.state import Fence
    from receipts.clock import now_ms

    job_id = enqueue()
    assert queue.lease(job_id, worker_id="chat:h:1").applied
    retry_at = now_ms() + 3_600_000
    queue.fail(job_id, "provider said 429", fence=Fence("chat:h:1", 1), retry_at=retry_at)
    assert queue.get(job_id).status == "queued"

    tab.goto(f"/admin/jobs/job/{job_id}/change/")
    expect(tab.locator("#rcpt-retrying")).to_contain_text("retrying at")
    expect(tab.locator("#rcpt-retrying")).to_contain_text("after attempt 1 failed")
    expect(tab.locator("#rcpt-diagnosis")).to_contain_text("provider said 429")
    shot(tab, "job-backoff")
    sizes = tab.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], sizes


def test_a_stream_with_long_receipt_bodies_fits_the_window(tab: Page):
    """A long body, context and type stay inside their cells at 1280 px: the table
    does not push the page wider than the window (the header bar stops at its edge)."""
    long_text = "lorem-ipsum-" * 40
    job_id = queue.enqueue(
        "factory",
        {"kind": "factory.run", "authContext": AUTH, "note": long_text, "more": [long_text] * 3},
    ).job.job_id
    tab.goto(f"/admin/receipts/stream/{quote('jobs/' + job_id)}/change/")
    expect(tab.locator("h1")).to_have_text(f"jobs/{job_id}")
    tab.locator("#rcpt-receipts details summary").first.click()  # the whole body, opened
    expect(tab.locator("#rcpt-receipts pre.rcpt-json").first).to_be_visible()
    shot(tab, "stream-long-body")
    widths = tab.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], widths
