"""Issue 34 item 4: the dashboard's Limits table at 1280 px, for a server whose runworkers
share a cap per customer and a rate: the busiest key, running of its cap, the deliveries
it holds, and the rate's starts in its window; it fits the page and refreshes by polling."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from jobs import limits, queue
from jobs.core.limits import UNTIL_WOKEN_MS
from jobs.models import DeliveryPromise
from receipts.clock import now_ms as wall_clock_ms
from tests.browser.conftest import _require_chromium
from tests.browser.test_triage import AUTH, LAPTOP, SHOTS, open_at, shots_dir  # noqa: F401
from tests.integration.live.conftest import Server, serve

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIMITS = [
    {"name": "per-customer", "kinds": ["factory.run"], "concurrency": 2, "key": "customer"},
    {"name": "llm-provider", "queues": ["chat"], "rate": "30/m"},
]


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Server]:
    """The admin's server with the limits declared (as RECEIPT_LIMITS)."""
    _require_chromium()
    with (
        django_db_blocker.unblock(),
        serve(tmp_path_factory.mktemp("limits"), RECEIPT_LIMITS=json.dumps(LIMITS)) as running,
    ):
        yield running


def _capped(customer: str) -> str:
    body = {"kind": "factory.run", "authContext": AUTH, "customer": customer}
    return queue.enqueue("factory", body).job.job_id


def test_the_limits_table_at_1280_shows_how_full_each_limit_is(open_at, settings):  # noqa: F811
    # the enqueue opens its delivery at once (SQLite dispatches in a thread otherwise)
    settings.RECEIPT = dataclasses.replace(settings.RECEIPT, dispatch_mode="inline")
    running = _capped("acme")
    start, _ = queue.start_attempt(
        running, worker_id="chat:h:1", attempt=1, gate=lambda job: "per-customer:acme"
    )
    assert start is queue.Start.LEASED
    waiting = _capped("acme")  # its delivery held at the cap, as a runworker holds it
    [promise] = DeliveryPromise.objects.filter(job_id=waiting).values_list("id", flat=True)
    limits.hold(
        promise, limits.Hold("cap:per-customer:acme", UNTIL_WOKEN_MS), now_ms=wall_clock_ms()
    )

    page = open_at(LAPTOP["width"], LAPTOP["height"])
    page.goto("/admin/jobs/job/dashboard/")
    table = page.locator("#rcpt-table-limits")
    expect(table).to_be_visible()
    cap = table.locator("tr", has_text="per-customer")
    expect(cap).to_contain_text("cap 2 at once per customer")
    expect(cap).to_contain_text("acme")
    expect(cap).to_contain_text("1 / 2")
    expect(table.locator("tr", has_text="llm-provider")).to_contain_text("rate 30/m")
    table.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "limits-1280.png"), full_page=True)
    sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], sizes

    second = _capped("acme")  # a second running job: the next poll shows the cap full
    assert (
        queue.start_attempt(
            second, worker_id="chat:h:1", attempt=1, gate=lambda job: "per-customer:acme"
        )[0]
        is queue.Start.LEASED
    )
    expect(cap).to_contain_text("2 / 2", timeout=15_000)
