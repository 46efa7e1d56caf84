"""System checks (`manage.py check`, and before runserver and migrate) naming what a
project that adds Receipt's apps has left out or made unsafe.

- receipt.W001: no RECEIPT settings block: Receipt runs on its defaults.
- receipt.E002: Receipt's URLs are not included, so its admin pages cannot link to them.
- receipt.W003: a SQLite database whose explicit OPTIONS undo Receipt's set-up.
- receipt.E004: a Q_CLUSTER setting that is not Receipt's.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.db import connections
from django.urls import NoReverseMatch, reverse

from receipt_site import conf, databases

INCLUDE_LINE = 'path("receipt/", include("receipt_site.host_urls"))'
SAFE_TRANSACTION_MODES = ("IMMEDIATE", "EXCLUSIVE")
MIN_BUSY_TIMEOUT_S = 5


def register() -> None:
    checks.register(settings_block)
    checks.register(url_include, checks.Tags.urls)
    checks.register(sqlite_setup)  # from the settings: the database tag runs only on demand
    checks.register(queue_cluster)


def settings_block(**kwargs: Any) -> list[checks.CheckMessage]:
    if conf.source != "defaults":
        return []
    return [
        checks.Warning(
            "There is no RECEIPT settings block: Receipt runs on its defaults.",
            hint="Add RECEIPT = {} to your settings (its keys are in Receipt's README, "
            "'Add Receipt to your project') to say that the defaults are meant.",
            id="receipt.W001",
        )
    ]


def url_include(**kwargs: Any) -> list[checks.CheckMessage]:
    try:
        reverse("job-events", args=("job",))
    except NoReverseMatch:
        return [
            checks.Error(
                "Receipt's URLs are not included: the API, the live events and the "
                "admin's job pages need them.",
                hint=f"Add {INCLUDE_LINE} to your ROOT_URLCONF (any prefix will do).",
                id="receipt.E002",
            )
        ]
    return []


def sqlite_setup(**kwargs: Any) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = []
    for alias in connections:
        problems = sqlite_problems(connections[alias].settings_dict)
        if problems:
            found.append(
                checks.Warning(
                    f"DATABASES[{alias!r}] is SQLite with {', '.join(problems)}: concurrent "
                    "enqueues and workers will fail with 'database is locked'.",
                    hint="Remove these OPTIONS (Receipt then sets them up itself) or set "
                    f"OPTIONS = {databases.SQLITE_OPTIONS!r}.",
                    id="receipt.W003",
                )
            )
    return found


def sqlite_problems(database: dict[str, Any]) -> list[str]:
    """What a SQLite database's explicit OPTIONS undo of Receipt's set-up
    (databases.prepare_sqlite fills in whatever they leave unset)."""
    if "sqlite" not in str(database.get("ENGINE", "")):
        return []
    options = database.get("OPTIONS") or {}
    problems = []
    mode = options.get("transaction_mode", databases.SQLITE_TRANSACTION_MODE)
    if str(mode).upper() not in SAFE_TRANSACTION_MODES:
        problems.append(f"transaction_mode {mode}")
    timeout = options.get("timeout", databases.SQLITE_BUSY_TIMEOUT_S)
    if not isinstance(timeout, (int, float)) or timeout < MIN_BUSY_TIMEOUT_S:
        problems.append(f"a busy timeout of {timeout} s")
    init = str(options.get("init_command", "")).lower().replace(" ", "")
    if "journal_mode=" in init and "journal_mode=wal" not in init:
        problems.append("a journal mode other than WAL")
    return problems


def queue_cluster(**kwargs: Any) -> list[checks.CheckMessage]:
    if conf.is_receipt_cluster(getattr(settings, "Q_CLUSTER", None)):
        return []
    return [
        checks.Error(
            "Q_CLUSTER is set, but not to Receipt's clusters: runworker would serve "
            "queues nobody sends to.",
            hint="Remove Q_CLUSTER from your settings: Receipt derives it from RECEIPT.",
            id="receipt.E004",
        )
    ]
