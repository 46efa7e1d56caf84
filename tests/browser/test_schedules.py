"""Issue 34 item 1: the Schedules page at 1280 px: next run, last run and the last outcome
(a link to the job) in view without scrolling sideways, and pause from the action bar."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from jobs import schedules
from jobs.core.schedules import Schedule, tick_job_id
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.browser.test_triage import AUTH, LAPTOP, SHOTS, open_at, shots_dir  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
MINUTE = 60_000


def test_schedules_page_at_1280_shows_runs_and_outcomes_and_pauses(open_at):  # noqa: F811
    now = wall_clock_ms()
    payload = {"kind": "factory.run", "authContext": AUTH}
    items = [
        Schedule("nightly-report", "factory", payload, cron="0 3 * * *", timezone="Europe/Paris"),
        Schedule("pulse", "factory", payload, cron="* * * * *"),
    ]
    assert schedules.sync([(s, "code") for s in items], now_ms=now - 2 * MINUTE).errors == []
    schedules.fire_due(now_ms=now)
    tick = now - now % MINUTE

    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/schedule/")
    expect(page.locator("h1")).to_contain_text("schedule")
    results = page.locator("#result_list")
    for column in ("Next run", "Last run", "Last outcome"):
        expect(results.locator("thead")).to_contain_text(column, ignore_case=True)
    pulse = results.locator("tr", has_text="pulse")
    outcome = pulse.locator("td.field-last_outcome a")
    expect(outcome).to_have_attribute("title", tick_job_id("pulse", tick))
    expect(outcome).to_contain_text("queued")
    widths = page.evaluate(
        """() => { const r = document.querySelector('#changelist .results');
                   return [r.scrollWidth, r.clientWidth, document.documentElement.scrollWidth,
                           window.innerWidth]; }"""
    )
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths
    page.screenshot(path=str(SHOTS / "schedules-1280.png"))

    pulse.locator("input.action-select").check()
    page.select_option("select[name=action]", "pause_selected")
    page.locator("button[name=index]").click()
    expect(page.locator(".messagelist")).to_contain_text("Paused: pulse.")
    expect(results.locator("tr", has_text="pulse")).to_contain_text("paused by br-admin")
    last = store.read("schedules/pulse")[-1]
    assert (last.type, last.body["by"]) == ("schedule.paused", "br-admin")
