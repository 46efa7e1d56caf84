"""Every page the admin index leads to, at a laptop's 1280 px: each list the index links,
and the first row's own page of each list, with data of every kind in them (jobs queued,
leased, completed, failed and canceled, a task's job, an objective drained, a token, a
schedule).
A page must answer, stay inside the window's width, show every column of Receipt's own
lists without a scrollbar, and log no script error. Screenshots
go to /tmp/shots-sweep/ for a person to look at."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.admin.utils import quote
from playwright.sync_api import Page

from access.models import ApiToken
from jobs import queue, schedules
from jobs.core.schedules import Schedule
from jobs.core.state import Fence
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.objectives.conftest import create, diamond, drain

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/tmp/shots-sweep")
AUTH = {"userId": "u-1", "organizationId": "org-1"}
WIDTH = 1280
# The innermost elements that end past the window's right edge: what to fix.
OUTSIDE = """() => [...document.querySelectorAll("body *")]
    .filter((e) => e.children.length === 0 && e.getBoundingClientRect().right > innerWidth + 1)
    .slice(0, 3).map((e) => `${e.tagName}.${e.className} "${e.textContent.slice(0, 30)}" in `
        + `#${e.closest("[id]")?.id}`)"""


# Receipt's own lists must show every column in the window, not behind a scrollbar.
OWN_LISTS = tuple(f"/admin/{app}/" for app in ("jobs", "receipts", "objectives", "access"))
HIDDEN = """() => [...document.querySelectorAll(".results")]
    .filter((box) => box.scrollWidth > box.clientWidth + 1)
    .map((box) => `${box.scrollWidth - box.clientWidth} px: ` + [...box.querySelectorAll("th")]
        .filter((th) => th.getBoundingClientRect().right > box.getBoundingClientRect().right + 1)
        .map((th) => th.textContent.trim()).join(", ")).join("; ")"""


LONG = "x" * 300  # no space to break at: it must wrap or scroll inside its box


def _seed() -> list[str]:
    """Data of every kind, with long values where a client or a handler sets the text;
    returns the ids of the jobs made here."""

    def job(**options: Any) -> str:
        payload = {"kind": "factory.run", "authContext": AUTH, "prompt": LONG}
        return queue.enqueue("factory", payload, **options).job.job_id

    made = [job(session_key="s" * 255), job(), job(), job(), job()]  # queued; more below
    # a task's job: its list row and page name the task by a long module path
    path = "shop." + "long_module_name." * 8 + "send_receipt_email"
    task = {"kind": "django.task", "task": path, "args": [LONG], "kwargs": {}}
    made.append(queue.enqueue("django-task", task).job.job_id)
    worker, fence = "chat:h:1", Fence("chat:h:1", 1)
    assert queue.lease(made[4], worker_id=worker).applied  # leased, never settled
    assert queue.lease(made[1], worker_id=worker).applied
    assert queue.fail(made[1], f"RuntimeError: {LONG}", fence=fence, no_retry=True).applied
    assert queue.lease(made[2], worker_id=worker).applied
    assert queue.complete(made[2], {"answer": LONG}, fence=fence).applied
    queue.abort(made[3], reason="an operator's long reason " * 8, by="ops")
    create(title="Sweep", tasks=diamond())
    drain()
    ApiToken.issue(name="sweep-token", scopes=["jobs:read"])
    pulse = Schedule("p" * 64, "factory", {"kind": "factory.run", "authContext": AUTH}, every_s=60)
    assert schedules.sync([(pulse, "code")], now_ms=wall_clock_ms()).errors == []
    return made


def _problems(tab: Page, path: str, errors: list[str]) -> list[str]:
    errors.clear()
    response = tab.goto(path)
    found = []
    if response is None or response.status >= 400:
        found.append(f"{path}: answered {response.status if response else 'nothing'}")
    tab.wait_for_load_state("load")
    document, window = tab.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    if document > window:
        found.append(f"{path}: {document} px wide in a {window} px window: {tab.evaluate(OUTSIDE)}")
    if path.startswith(OWN_LISTS):  # a hidden last column is as bad as a wide page
        hidden = tab.evaluate(HIDDEN)
        if hidden:
            found.append(f"{path}: its table scrolls {hidden}")
    found += [f"{path}: script error {error}" for error in errors]
    name = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "index"
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / f"{name[:80]}.png"), full_page=True)
    return found


def _admin_links(tab: Page, selector: str) -> list[str]:
    hrefs = tab.locator(selector).evaluate_all("(links) => links.map((a) => a.href)")
    paths = [
        urlsplit(href).path + (f"?{urlsplit(href).query}" if urlsplit(href).query else "")
        for href in hrefs
    ]
    return list(dict.fromkeys(p for p in paths if p.startswith("/admin/") and "/add/" not in p))


def test_every_page_the_index_leads_to_fits_1280_px_and_answers(tab: Page):
    made = _seed()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    problems = _problems(tab, "/admin/", errors)
    lists = _admin_links(tab, "#content-main th[scope=row] a")
    assert len(lists) >= 8, lists
    for path in lists:
        problems += _problems(tab, path, errors)
        rows = _admin_links(
            tab,
            "#result_list tbody th a, #result_list tbody td.field-job_id a, .rcpt-objective-row a",
        )
        if rows:
            problems += _problems(tab, rows[0], errors)
    for job_id in made:
        problems += _problems(tab, f"/admin/jobs/job/{job_id}/change/", errors)
        problems += _problems(
            tab, f"/admin/receipts/stream/{quote('jobs/' + job_id)}/change/", errors
        )
    assert not problems, "\n".join(problems)
