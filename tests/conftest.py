"""Shared fixtures. The backend is chosen per pytest run by scripts/test
(RECEIPT_TEST_BACKEND=sqlite|postgres with DATABASE_URL); every integration test runs on both."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

BACKEND = os.environ.get("RECEIPT_TEST_BACKEND", "sqlite")
# `receipt_worker`: queued jobs run to completion in-process (jobs.testing, issue 33 item 6)
pytest_plugins = ["jobs.testing.pytest_plugin"]


def pytest_report_header(config: pytest.Config) -> str:
    return f"receipt test backend: {BACKEND}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if BACKEND == "postgres":
        # The browser tests drive pages whose data paths the admin integration tests
        # already cover on both databases: they run once, in the SQLite leg.
        once = pytest.mark.skip(reason="browser tests run once, in the SQLite leg")
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(once)
        return
    skip = pytest.mark.skip(reason="PostgreSQL-only behaviour; runs in the PostgreSQL leg")
    for item in items:
        if "postgres_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _dispatch_thread_released_before_teardown(request: pytest.FixtureRequest) -> Any:
    """The dispatch outbox's thread keeps its connection for a few idle seconds: stop it
    before pytest-django drops the test database (which refuses while a session is open).
    Registered after the database set-up, so this finalizer runs before its teardown."""
    request.getfixturevalue("django_db_setup")
    blocker = request.getfixturevalue("django_db_blocker")
    yield
    from jobs.runtime import dispatch

    dispatch.OUTBOX.stop()
    with blocker.unblock():
        _end_other_sessions()


def _end_other_sessions() -> None:
    """PostgreSQL: a session another thread or a killed child left on the test database
    (now and then one outlives the run) would make its DROP fail after every test passed.
    End them, and name them on stderr, so a leak shows without failing the run."""
    from django.db import connection

    # Only the test database: a run whose tests never needed one is still on the server's
    # own database here, which other sessions may be using (or which may not exist).
    if connection.vendor != "postgresql" or not connection.settings_dict["NAME"].startswith(
        "test_"
    ):
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name, state, left(query, 80), "
            "pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        for row in cursor.fetchall():
            print(f"ended a session left on the test database: {row[:4]}", file=sys.stderr)


@pytest.fixture
def undispatched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enqueues leave every delivery to the after-commit dispatch pass, which never runs
    inside a test's transaction: the jobs stay queued with no driver promise, as they are
    on SQLite before the pass or after a crash (what redrive, diagnosis and the delivery
    texts act on). On PostgreSQL a plain enqueue otherwise opens it in its statement."""
    from jobs import queue

    monkeypatch.setattr(queue, "joined_dispatch", [])


def run_in_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    """Run `target(i)` in `count` threads released together; re-raise the first error.

    Each thread closes its own Django connection when done.
    """
    from django.db import connections

    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = target(i)
        except BaseException as error:  # collected and re-raised in the caller
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results


def test_database_url() -> str:
    """DATABASE_URL for a subprocess that must use this run's test database.

    Call it inside a test that has the database (pytest-django has renamed NAME to the
    test database by then). Data must be committed to be seen: use
    `@pytest.mark.django_db(transaction=True)`.
    """
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        user = db.get("USER") or ""
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        auth = f"{user}{password}@" if user else ""
        return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child Django process on the test database."""
    env = dict(os.environ)
    env.pop("RECEIPT_PROCESS_ROLE", None)
    env["DATABASE_URL"] = test_database_url()
    env.update(extra)
    return env


def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll `condition` until it returns a truthy value or the deadline passes."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def log_in_admin(http: Any, password: str) -> None:
    """Log `http` (an httpx.Client on a served site) in to the admin as `admin`."""
    http.get("/admin/login/")
    answer = http.post(
        "/admin/login/?next=/admin/",
        data={
            "username": "admin",
            "password": password,
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
            "next": "/admin/",
        },
        headers={"Referer": str(http.base_url) + "/admin/login/"},
    )
    assert answer.status_code == 302, answer.text[-2000:]
