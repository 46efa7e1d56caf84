"""Open health endpoints (A-8): `/healthz` always answers 200, `/readyz` 503 without a DB.

The queue block holds bounded counts (`jobs.counts`), so a probe costs the same with any
number of jobs or any queue length: active jobs per status counted up to
`counts.STATUS_CAP` (`capped` names the statuses that reached their cap: at least that
many), and settled jobs only of the last hour (`settledWindowMs`, up to
`counts.SETTLED_CAP`). Active counts are refreshed
every QUEUE_CACHE_SECONDS and settled ones every TERMINAL_CACHE_SECONDS, per process, so
a polling load balancer never turns health into a query storm.

Anyone gets status and counts. Where things run (the database file under the data
directory, host names, PIDs, job ids) needs a token or a staff session (Q-1): then
`loops` are the recovery loops' last runs in live processes, `clusters` the runworker
processes seen recently, `heldByGone` the jobs still held by processes that are gone.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

from access.principals import BadCredentials, principal_for_request
from jobs import counts
from jobs.core.vocabulary import ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES
from jobs.runtime import loops, processes, sandbox
from receipt_site.config import redact_url
from receipts.clock import now_ms

_STARTED = time.monotonic()
QUEUE_CACHE_SECONDS = 2.0
TERMINAL_CACHE_SECONDS = 60.0
SETTLED_WINDOW_MS = 3_600_000  # settled jobs are counted over the last hour only
_queue_lock = threading.Lock()
_queue_cache: dict[str, Any] = {}  # {"at": monotonic seconds, "block": {...}}
_terminal_cache: dict[str, Any] = {}


def _count_queue() -> dict[str, Any]:
    now = now_ms()
    if not _terminal_cache or time.monotonic() - _terminal_cache["at"] > TERMINAL_CACHE_SECONDS:
        settled = counts.by_status(
            sorted(TERMINAL_STATUSES),
            cap=counts.SETTLED_CAP,
            updated_since_ms=now - SETTLED_WINDOW_MS,
        )
        _terminal_cache.update(at=time.monotonic(), counts=settled)
    found = {**_terminal_cache["counts"], **counts.by_status(sorted(ACTIVE_STATUSES))}
    shown = {status: found.get(status, counts.Count(0)) for status in STATUSES}
    total = sum(shown.values(), counts.Count(0))
    return {
        "total": total.value,
        **{status: n.value for status, n in shown.items()},
        "capped": [status for status, n in shown.items() if n.capped],
        "countCap": counts.STATUS_CAP,
        "settledCap": counts.SETTLED_CAP,
        "settledWindowMs": SETTLED_WINDOW_MS,
        "updatedAt": now,
    }


def queue_counts() -> dict[str, Any]:
    """Jobs by status (A-8), at most QUEUE_CACHE_SECONDS old; never raises."""
    with _queue_lock:
        cached = _queue_cache.get("block")
        if cached is not None and time.monotonic() - _queue_cache["at"] < QUEUE_CACHE_SECONDS:
            return cached
        try:
            block = _count_queue()
        except Exception as error:  # health answers whatever the database does
            stale: dict[str, Any] = (
                dict(cached)
                if cached
                else {
                    "total": None,
                    **dict.fromkeys(STATUSES),
                    "capped": [],
                    "countCap": counts.STATUS_CAP,
                    "settledCap": counts.SETTLED_CAP,
                    "settledWindowMs": SETTLED_WINDOW_MS,
                    "updatedAt": None,
                }
            )
            return {**stale, "error": type(error).__name__}
        _queue_cache.update(at=time.monotonic(), block=block)
        return block


def reset_queue_cache() -> None:
    with _queue_lock:
        _queue_cache.clear()
        _terminal_cache.clear()


def _runtime() -> dict[str, Any]:
    """Loops of live processes, processes, jobs held by gone ones, and the warnings in
    two wordings: `public` names no host or process, `detailed` does. Never raises."""
    try:
        now = now_ms()
        clusters = processes.summary(now_ms=now)
        live = [c for c in clusters if c["live"]]
        held = processes.held_by_gone(now_ms=now)
        loop_runs = loops.summary(process_ids=[c["id"] for c in live])
    except Exception as error:
        return _no_runtime(f"runtime state unavailable: {type(error).__name__}")
    public, detailed = [], []
    for c in live:
        warning = (c.get("info") or {}).get("warning")
        if warning:
            public.append(f"a {c['role']} process: {warning}")
            detailed.append(f"{c['id']}: {warning}")
    if held:
        jobs = sum(entry["jobs"] for entry in held)
        public.append(
            f"{jobs} job(s) held by {len(held)} gone process(es); a live worker "
            "releases them, else their leases run out"
        )
        detailed += [
            f"{entry['process']} is gone and still holds {entry['jobs']} job(s): "
            + ", ".join(entry["jobIds"])
            for entry in held
        ]
    return {
        "loops": loop_runs,
        "clusters": clusters,
        "held": held,
        "public": public,
        "detailed": detailed,
    }


def _no_runtime(*warnings: str) -> dict[str, Any]:
    return {
        "loops": [],
        "clusters": [],
        "held": [],
        "public": list(warnings),
        "detailed": list(warnings),
    }


def _may_see_detail(request: HttpRequest) -> bool:
    try:
        return principal_for_request(request) is not None
    except BadCredentials:  # a bad token gets the open answer, like no token
        return False


def _counts(runtime: dict[str, Any]) -> dict[str, int]:
    live = sum(1 for c in runtime["clusters"] if c["live"])
    failing = sum(
        1
        for r in runtime["loops"]
        if r["lastErrorAt"] is not None and r["lastErrorAt"] >= r["lastStartedAt"]
    )
    return {
        "processesLive": live,
        "processesGone": len(runtime["clusters"]) - live,
        "loops": len(runtime["loops"]),
        "loopsFailing": failing,
        "jobsHeldByGone": sum(entry["jobs"] for entry in runtime["held"]),
    }


def _database() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        target = redact_url(
            f"postgres://{db.get('USER') or ''}@{db.get('HOST')}:{db.get('PORT') or 5432}/{db['NAME']}"
        )
    else:
        target = f"sqlite:{db['NAME']}"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor, "target": target}
    except Exception as error:  # health must answer whatever the database does
        return {
            "ok": False,
            "vendor": connection.vendor,
            "target": target,
            "error": type(error).__name__,
        }


def healthz(request: HttpRequest) -> JsonResponse:
    database = _database()
    runtime = _runtime() if database["ok"] else _no_runtime()
    detail = database["ok"] and _may_see_detail(request)
    commands = sandbox.status()  # "commands disabled: no sandbox" where it is so
    body: dict[str, Any] = {
        "ok": True,
        "ready": database["ok"],
        "degraded": not database["ok"] or bool(runtime["public"]) or not commands["enabled"],
        "warnings": runtime["detailed" if detail else "public"]
        + ([commands["warning"]] if commands["warning"] else []),
        "uptimeSec": int(time.monotonic() - _STARTED),
        "processRole": settings.RECEIPT.process_role or "api",
        "queue": queue_counts(),
        "runtime": _counts(runtime),
        "database": database if detail else _without_target(database),
        "commands": {"sandbox": commands["sandbox"], "enabled": commands["enabled"]},
        "detail": detail,
    }
    if detail:
        body.update(
            loops=runtime["loops"], clusters=runtime["clusters"], heldByGone=runtime["held"]
        )
    return JsonResponse(body)


def _without_target(database: dict[str, Any]) -> dict[str, Any]:
    """The database block for an open answer: its target names the data directory."""
    return {key: value for key, value in database.items() if key != "target"}


def readyz(request: HttpRequest) -> JsonResponse:
    database = _database()
    shown = database if database["ok"] and _may_see_detail(request) else _without_target(database)
    return JsonResponse(
        {"ok": database["ok"], "database": shown}, status=200 if database["ok"] else 503
    )
