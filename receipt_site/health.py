"""Open health endpoints (A-8): `/healthz` always answers 200, `/readyz` 503 without a DB.

The queue block counts active jobs (an indexed range: few rows) every QUEUE_CACHE_SECONDS
and settled ones (the bulk of a large table) only every TERMINAL_CACHE_SECONDS, per
process, so a polling load balancer never turns health into a query storm. `loops` are
the recovery loops' last runs, `clusters` the runworker processes seen recently.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.http import HttpRequest, JsonResponse

from jobs.core.vocabulary import ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES
from jobs.models import Job
from jobs.runtime import loops, processes
from receipt_site.config import redact_url
from receipts.clock import now_ms

_STARTED = time.monotonic()
QUEUE_CACHE_SECONDS = 2.0
TERMINAL_CACHE_SECONDS = 60.0
_queue_lock = threading.Lock()
_queue_cache: dict[str, Any] = {}  # {"at": monotonic seconds, "block": {...}}
_terminal_cache: dict[str, Any] = {}


def _count(statuses: frozenset[str]) -> dict[str, int]:
    counts = dict.fromkeys(sorted(statuses), 0)
    rows = (Job.objects.filter(status__in=statuses).order_by().values_list("status")
            .annotate(n=Count("id")))
    for status, n in rows:
        counts[status] = n
    return counts


def _count_queue() -> dict[str, Any]:
    if not _terminal_cache or time.monotonic() - _terminal_cache["at"] > TERMINAL_CACHE_SECONDS:
        _terminal_cache.update(at=time.monotonic(), counts=_count(TERMINAL_STATUSES))
    counts = {**dict.fromkeys(STATUSES, 0), **_terminal_cache["counts"], **_count(ACTIVE_STATUSES)}
    return {"total": sum(counts.values()), **counts, "updatedAt": now_ms()}


def queue_counts() -> dict[str, Any]:
    """Jobs by status (A-8), at most QUEUE_CACHE_SECONDS old; never raises."""
    with _queue_lock:
        cached = _queue_cache.get("block")
        if cached is not None and time.monotonic() - _queue_cache["at"] < QUEUE_CACHE_SECONDS:
            return cached
        try:
            block = _count_queue()
        except Exception as error:  # health answers whatever the database does
            stale = dict(cached) if cached else {"total": None, **dict.fromkeys(STATUSES),
                                                 "updatedAt": None}
            return {**stale, "error": type(error).__name__}
        _queue_cache.update(at=time.monotonic(), block=block)
        return block


def reset_queue_cache() -> None:
    with _queue_lock:
        _queue_cache.clear()
        _terminal_cache.clear()


def _runtime() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(loops, clusters, warnings); never raises."""
    try:
        clusters = processes.summary(now_ms=now_ms())
        warnings = [f"{c['id']}: {w}" for c in clusters if c["live"]
                    for w in [(c.get("info") or {}).get("warning")] if w]
        return loops.summary(), clusters, warnings
    except Exception as error:
        return [], [], [f"runtime state unavailable: {type(error).__name__}"]


def _database() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        target = redact_url(f"postgres://{db.get('USER') or ''}@{db.get('HOST')}:{db.get('PORT') or 5432}/{db['NAME']}")
    else:
        target = f"sqlite:{db['NAME']}"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor, "target": target}
    except Exception as error:  # health must answer whatever the database does
        return {"ok": False, "vendor": connection.vendor, "target": target,
                "error": type(error).__name__}


def healthz(request: HttpRequest) -> JsonResponse:
    database = _database()
    loop_runs, clusters, warnings = _runtime() if database["ok"] else ([], [], [])
    return JsonResponse({
        "ok": True,
        "ready": database["ok"],
        "degraded": not database["ok"] or bool(warnings),
        "warnings": warnings,
        "uptimeSec": int(time.monotonic() - _STARTED),
        "processRole": settings.RECEIPT.process_role or "api",
        "queue": queue_counts(),
        "database": database,
        "loops": loop_runs,
        "clusters": clusters,
    })


def readyz(request: HttpRequest) -> JsonResponse:
    database = _database()
    return JsonResponse({"ok": database["ok"], "database": database},
                        status=200 if database["ok"] else 503)
