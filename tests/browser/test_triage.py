"""Operator triage on a laptop screen: the jobs list answers "what failed and why, what is
stuck, what is busy" at 1280 px, and the dashboard's panels never overlap or scroll the page
sideways at 1280, 1440 and 1920 px. Screenshots land in /tmp/shots/ for a person to look at."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from jobs import queue
from jobs.core.state import Fence
from tests.browser.conftest import PASSWORD, TIMEOUT_MS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/tmp/shots")
AUTH = {"userId": "u-1", "organizationId": "org-1"}
LAPTOP = {"width": 1280, "height": 800}
ERROR = (
    "ConnectionRefusedError: upstream model gateway refused the connection after 3 retries\n"
    "  File handler.py, line 42, in run"
)


def enqueue(agent: str = "factory", kind: str = "factory.run") -> str:
    body = {"kind": kind, "authContext": AUTH}
    return queue.enqueue(agent, body).job.job_id


def fail(job_id: str, error: str) -> None:
    worker = "chat:h:1"
    assert queue.lease(job_id, worker_id=worker).applied
    assert queue.fail(job_id, error, fence=Fence(worker, 1), no_retry=True).applied


def complete(job_id: str) -> None:
    worker = "chat:h:1"
    assert queue.lease(job_id, worker_id=worker).applied
    assert queue.complete(job_id, {"ok": True}, fence=Fence(worker, 1)).applied


@pytest.fixture(autouse=True)
def shots_dir() -> None:
    SHOTS.mkdir(exist_ok=True)


@pytest.fixture
def open_at(chromium: Browser, web, admin_user) -> Iterator[object]:
    """Open a logged-in page at a given viewport width."""
    contexts = []

    def opened(width: int, height: int = 800) -> Page:
        context = chromium.new_context(
            base_url=web.url, viewport={"width": width, "height": height}
        )
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        tab = context.new_page()
        tab.goto("/admin/login/?next=/admin/")
        tab.fill("#id_username", admin_user.username)
        tab.fill("#id_password", PASSWORD)
        tab.click("input[type=submit]")
        expect(tab.locator("#user-tools")).to_contain_text(admin_user.username)
        return tab

    yield opened
    for context in contexts:
        context.close()


@pytest.fixture
def mixed_jobs() -> dict[str, Any]:
    """30 jobs: queued, completed, and failures of a known and of an unknown agent."""
    made: dict[str, Any] = {"queued": [enqueue() for _ in range(20)]}
    made["done"] = [enqueue() for _ in range(5)]
    for job_id in made["done"]:
        complete(job_id)
    made["failed"] = enqueue()
    fail(made["failed"], ERROR)
    made["ghost"] = enqueue("ghost-agent")
    fail(made["ghost"], "no handler for agent ghost-agent")
    return made


def rows_in_view(page: Page) -> int:
    """Result rows wholly inside the viewport, without scrolling."""
    return page.evaluate(
        """() => [...document.querySelectorAll('#result_list tbody tr')]
              .filter(tr => tr.getBoundingClientRect().bottom <= window.innerHeight).length"""
    )


def test_jobs_list_at_1280_shows_errors_ages_and_twenty_rows(open_at, mixed_jobs):
    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/job/")
    expect(page.locator("h1")).to_have_text("Jobs")
    expect(page).to_have_title(re.compile(r"^Jobs\b"))
    results = page.locator("#result_list")
    failed = results.locator("tr", has_text=mixed_jobs["failed"])
    error = failed.locator("td.field-error_col .rcpt-error")
    expect(error).to_have_text(ERROR.splitlines()[0])  # the first line only...
    expect(error).to_have_attribute("title", ERROR)  # ...the rest in its tooltip
    expect(failed.locator("td.field-created_col")).to_have_text(re.compile(r"^\d+ (s|min) ago$"))
    expect(
        results.locator("tr", has_text=mixed_jobs["queued"][0]).locator("td.field-error_col")
    ).to_have_text("—")
    page.screenshot(path=str(SHOTS / "jobs-list-1280.png"))

    # one line per row: every id cell is as tall as a single line of its text
    heights = page.evaluate(
        """() => [...document.querySelectorAll('#result_list tbody .field-id_col .rcpt-id')]
              .map(el => [el.getBoundingClientRect().height,
                          parseFloat(getComputedStyle(el).lineHeight)])"""
    )
    assert heights and all(height <= line * 1.5 for height, line in heights), heights
    assert rows_in_view(page) >= 20
    # the table fits: nothing of it is cut off at the right or scrolls sideways
    widths = page.evaluate(
        """() => { const r = document.querySelector('#changelist .results');
                   return [r.scrollWidth, r.clientWidth, document.documentElement.scrollWidth,
                           window.innerWidth]; }"""
    )
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths


def test_agent_filter_offers_an_agent_without_a_handler(open_at, mixed_jobs):
    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/job/")
    page.locator("#changelist-filter").get_by_role("link", name="ghost-agent", exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]agent=ghost-agent(&|$)"))
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(mixed_jobs["ghost"])
    expect(rows.first.locator(".rcpt-error")).to_have_text("no handler for agent ghost-agent")


PANELS_OVERLAPPING = """() => {
  const boxes = [...document.querySelectorAll('#rcpt-dashboard .rcpt-panel')].map(el => {
    const r = el.getBoundingClientRect();
    return {id: el.id, left: r.left, right: r.right, top: r.top, bottom: r.bottom,
            overflowing: el.scrollWidth > el.clientWidth + 1};
  });
  const clash = [];
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach(b => {
    if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
      clash.push(a.id + ' x ' + b.id);
  }));
  boxes.filter(b => b.overflowing).forEach(b => clash.push(b.id + ' overflows'));
  return {count: boxes.length, clash: clash};
}"""


@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_dashboard_panels_never_overlap(open_at, mixed_jobs, width):
    page = open_at(width, 900)
    page.goto("/admin/jobs/job/dashboard/")
    expect(page.locator("#rcpt-table-loops")).to_be_visible()
    page.screenshot(path=str(SHOTS / f"dashboard-{width}.png"), full_page=True)
    found = page.evaluate(PANELS_OVERLAPPING)
    assert found["count"] >= 12 and found["clash"] == [], found
    # the panels' own tables are inside their panels, not drawn over a neighbour's
    tables_outside = page.evaluate(
        """() => [...document.querySelectorAll('#rcpt-dashboard .rcpt-panel table')]
              .filter(t => { const p = t.closest('.rcpt-scroll') || t.closest('.rcpt-panel');
                             return t.getBoundingClientRect().right
                                    > p.getBoundingClientRect().right + 1
                                    && getComputedStyle(p).overflowX === 'visible'; })
              .map(t => t.id)"""
    )
    assert tables_outside == []
    sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], sizes  # no sideways scrolling


def test_dashboard_chart_and_capacity_refresh_live(open_at, mixed_jobs):
    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/job/dashboard/")
    chart = page.locator("svg#rcpt-chart")
    expect(chart).to_be_visible()
    expect(chart.locator("rect.rcpt-bar-failed")).to_have_count(1)  # both failures, one minute
    expect(page.locator("#rcpt-chart-failed")).to_have_text("2")
    capacity = page.locator("#rcpt-table-capacity")
    expect(capacity.locator("tbody tr").first).to_contain_text("0 / 0")
    config = page.locator("details#panel-config")
    expect(config.locator("#rcpt-config")).to_be_hidden()  # folded away until asked for
    page.screenshot(path=str(SHOTS / "dashboard-top-1280.png"))

    another = enqueue()
    fail(another, "TimeoutError: the model did not answer")
    expect(page.locator("#rcpt-chart-failed")).to_have_text("3")  # the 3 s poll redrew it
    expect(chart.locator("rect.rcpt-bar-failed")).to_have_count(1)
    assert page.locator("#rcpt-live-status").text_content() == "refreshing every 3 s"

    config.locator("summary").click()
    expect(config.locator("#rcpt-config")).to_be_visible()
    expect(config.locator("#rcpt-config")).to_contain_text("JOB_LEASE_MS")


LONG_KIND_ROW = """() => {
  const header = document.querySelector('#result_list thead th.column-error_col');
  const r = header.getBoundingClientRect();
  const box = document.querySelector('#changelist .results').getBoundingClientRect();
  const label = header.querySelector('.text span, .text a') || header;
  const kinds = [...document.querySelectorAll('#result_list tbody td.field-kind_col')];
  return {left: r.left, right: r.right, width: window.innerWidth, resultsRight: box.right,
          header: header.innerText.trim(), labelCut: label.scrollWidth > label.clientWidth,
          errorWidth: document.querySelector('#result_list tbody td.field-error_col')
                        .getBoundingClientRect().width,
          kindWidest: Math.max(...kinds.map(td => td.getBoundingClientRect().width)),
          kindTitles: kinds.map(td => (td.querySelector('[title]') || {}).title || '')};
}"""


def test_last_error_stays_in_view_beside_a_long_kind(open_at, mixed_jobs):
    """Issue 34 item 6: a `factory.objective.control` row once pushed the last-error
    column out of view at 1280 px (its header read "LAST E")."""
    long_kind = enqueue("factory-control", "factory.objective.control")
    fail(long_kind, ERROR)
    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/job/")
    expect(page.locator("#result_list tbody tr", has_text=long_kind)).to_be_visible()
    page.screenshot(path=str(SHOTS / "jobs-list-long-kind-1280.png"))
    found = page.evaluate(LONG_KIND_ROW)
    assert found["header"].upper() == "LAST ERROR", found
    assert found["left"] >= 0 and found["right"] <= found["width"], found
    assert found["right"] <= found["resultsRight"] + 1 and not found["labelCut"], found
    assert found["errorWidth"] >= 120, found  # room to read the start of an error
    assert "factory.objective.control" in found["kindTitles"], found  # whole in its tooltip
