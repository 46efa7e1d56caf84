"""Issue 34 item 5: the Queues page at 1280 px: every worker group, a pause and a resume
by button, recorded with the admin as `by`, and the paused state on the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from receipts import store
from tests.browser.test_triage import LAPTOP, SHOTS, open_at, shots_dir  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_queues_page_at_1280_pauses_and_resumes_a_group(open_at):  # noqa: F811
    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/queue/")
    expect(page.locator("h1")).to_contain_text("Queues")
    codex = page.locator('#rcpt-queues tr[data-group="codex"]')
    expect(codex).to_contain_text("running")
    codex.get_by_role("button", name="Pause").click()
    expect(page.locator(".messagelist")).to_contain_text("Queue codex paused by br-admin.")
    codex = page.locator('#rcpt-queues tr[data-group="codex"]')
    expect(codex).to_contain_text("paused by br-admin")
    page.screenshot(path=str(SHOTS / "queues-1280.png"))
    sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], sizes
    codex.get_by_role("button", name="Resume").click()
    expect(page.locator('#rcpt-queues tr[data-group="codex"]')).to_contain_text("running")
    assert [(r.type, r.body["by"]) for r in store.read("queues/codex")] == [
        ("queue.paused", "br-admin"),
        ("queue.resumed", "br-admin"),
    ]
