"""DATABASE_URL -> Django DATABASES entry (PostgreSQL via psycopg 3, or SQLite in WAL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# A request waits this long for a pooled connection; then it is answered 503
# `database_unavailable` (C-8): while the database is down every request waits this long.
POOL_WAIT_S = 5.0
# The pool retries a failed connection with a doubling delay (1 s, 2 s, 4 s, ...) for this
# long, then gives up until the next request asks (psycopg_pool's default is 5 minutes:
# after a long outage its next try could be a minute after the database is back).
POOL_RECONNECT_S = 5.0


# WAL + IMMEDIATE transactions + a busy timeout: writers queue instead of failing with
# "database is locked", and a read never has to upgrade to a write mid-transaction.
SQLITE_TRANSACTION_MODE = "IMMEDIATE"
SQLITE_BUSY_TIMEOUT_S = 20
SQLITE_INIT = {"journal_mode": "WAL", "synchronous": "NORMAL"}
SQLITE_OPTIONS = {
    "transaction_mode": SQLITE_TRANSACTION_MODE,
    "timeout": SQLITE_BUSY_TIMEOUT_S,
    "init_command": " ".join(f"PRAGMA {k}={v};" for k, v in SQLITE_INIT.items()),
}


def sqlite_database(path: Path) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": dict(SQLITE_OPTIONS),
        "TEST": {"NAME": str(path.with_name(f"test_{path.name}"))},
    }


def database_from_url(url: str | None, *, data_dir: Path, pool: bool = False) -> dict[str, Any]:
    if not url:
        return sqlite_database(data_dir / "receipt.sqlite3")
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path
        raw = unquote(parts.path)
        path = Path(raw[1:])
        return sqlite_database(path if path.is_absolute() else Path.cwd() / path)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    # Django turns prepared statements off (prepare_threshold=None) for the sake of
    # transaction-mode poolers, which also silences psycopg's `prepare=True`: the store's
    # hot statements then pay parse and plan on every append. Turned back on; Django's own
    # queries use client-side binding and are never prepared. `?prepare=off` for a pooler.
    options: dict[str, Any] = {"prepare_threshold": None if query.get("prepare") == "off" else 100}
    if "sslmode" in query:
        options["sslmode"] = query["sslmode"]
    if pool:
        # psycopg_pool: shared by all threads (ASGI); Django requires CONN_MAX_AGE 0 with it.
        options["pool"] = {
            "min_size": 1,
            "max_size": 10,
            "timeout": POOL_WAIT_S,
            "reconnect_timeout": POOL_RECONNECT_S,
        }
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "receipt",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": 0 if pool else 60,
        "CONN_HEALTH_CHECKS": not pool,
        "OPTIONS": options,
    }


def prepare_sqlite(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created: Receipt's SQLite set-up on a database whose settings leave it
    unset (a host project's default `db.sqlite3` has none of it). What the OPTIONS say
    explicitly is left alone; `receipt_site.checks` warns where that is unsafe."""
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return
    options = connection.settings_dict.get("OPTIONS") or {}
    if "transaction_mode" not in options:
        connection.transaction_mode = SQLITE_TRANSACTION_MODE  # read by each BEGIN
    init = str(options.get("init_command", "")).lower()
    pragmas = [f"PRAGMA {k}={v}" for k, v in SQLITE_INIT.items() if k not in init]
    if "timeout" not in options:
        pragmas.append(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
    for pragma in pragmas:
        connection.connection.execute(pragma)
