"""Headless Chromium (Debian's /usr/bin/chromium) driving the admin served by a real uvicorn.

Playwright's wheel bundles its driver; no browser is ever downloaded. Without chromium the
browser tests skip, except when CI=true: CI installs it (.ci/run), so there they fail.
Data must be committed for the server to see it: every test here is transactional.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.live.conftest import Server, serve

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 10_000
PASSWORD = "browser-pw-1"


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} not found: apt-get install chromium (Debian) to run the browser tests"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Server]:
    """One uvicorn for the module, on this run's test database."""
    _require_chromium()
    with django_db_blocker.unblock(), serve(tmp_path_factory.mktemp("browser")) as running:
        yield running


@pytest.fixture(scope="module")
def chromium(web: Server) -> Iterator[object]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop running in this thread, which Django would
    # take for an async context; the test's ORM calls are plain synchronous code.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                yield browser
            finally:
                browser.close()


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("br-admin", "br@example.com", PASSWORD)


def _logged_in(chromium, web: Server, admin_user, width: int, height: int) -> Iterator[object]:
    """A fresh browser context, logged in through /admin/login/ with real typing and a click."""
    from playwright.sync_api import expect

    context = chromium.new_context(base_url=web.url, viewport={"width": width, "height": height})
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    tab = context.new_page()
    try:
        tab.goto("/admin/login/?next=/admin/")
        tab.fill("#id_username", admin_user.username)
        tab.fill("#id_password", PASSWORD)
        tab.click("input[type=submit]")
        expect(tab.locator("#user-tools")).to_contain_text(admin_user.username)
        yield tab
    finally:
        context.close()


@pytest.fixture
def page(chromium, web: Server, admin_user) -> Iterator[object]:
    """A logged-in tab 1400 px wide."""
    yield from _logged_in(chromium, web, admin_user, 1400, 1000)


@pytest.fixture
def tab(chromium, web: Server, admin_user) -> Iterator[object]:
    """A logged-in tab 1280 px wide: a laptop's screen."""
    yield from _logged_in(chromium, web, admin_user, 1280, 900)
