"""Open health endpoints (A-8): `/healthz` always answers 200, `/readyz` 503 without a DB.

The queue block holds bounded counts (`jobs.counts`), so a probe costs the same with any
number of jobs or any queue length: active jobs per status counted up to
`counts.STATUS_CAP` (`capped` names the statuses that reached their cap: at least that
many), and settled jobs only of the last hour (`settledWindowMs`, up to
`counts.SETTLED_CAP`). Active counts are refreshed
every QUEUE_CACHE_SECONDS and settled ones every TERMINAL_CACHE_SECONDS, per process, so
a polling load balancer never turns health into a query storm.

Anyone gets status and counts. Where things run (the database file under the data
directory, host names, PIDs, job ids) needs an operator's credential (Q-1, Q-2): a token
bound to no organization, or a staff session, with the `jobs:read` scope. Then `loops`
are the recovery loops' last runs in live processes, `clusters` the runworker processes
seen recently, `heldByGone` the jobs still held by processes that are gone. Anyone gets
`workerGroups`: every worker group, built-in and declared, with its live processes. A token bound
to an organization gets the open answer with the queue counted over its own jobs only.

A child that runstack's supervisor sees failing at startup the same way every time is a
warning too (P-3), so a development stack is never degraded in silence.

While the database cannot be reached (C-8) `/readyz` answers 503 and `/healthz` says so
in `warnings`, without waiting on the queue counts (each would wait for a connection).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

from access.principals import BadCredentials, Principal, principal_for_request
from jobs import counts
from jobs.core.vocabulary import ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES
from jobs.runtime import loops, processes, sandbox
from jobs.timing_config import current_timing
from receipt_site import supervision
from receipt_site.config import redact_url
from receipts.clock import now_ms

_STARTED = time.monotonic()
QUEUE_CACHE_SECONDS = 2.0
TERMINAL_CACHE_SECONDS = 60.0
SETTLED_WINDOW_MS = 3_600_000  # settled jobs are counted over the last hour only
PROBE_WAIT_S = 2.0  # for a pooled connection, by the database check of both probes
DETAIL_SCOPE = "jobs:read"  # the detail names jobs: the scope that reads them
_queue_lock = threading.Lock()
# Per organization (None: the whole platform): {"at": monotonic seconds, "block": {...}}
# and {"at": ..., "counts": {...}}; emptied when ORG_CACHE_MAX organizations are held.
_queue_cache: dict[str | None, dict[str, Any]] = {}
_terminal_cache: dict[str | None, dict[str, Any]] = {}
ORG_CACHE_MAX = 256


def _count_queue(organization_id: str | None) -> dict[str, Any]:
    now = now_ms()
    terminal = _terminal_cache.get(organization_id)
    if terminal is None or time.monotonic() - terminal["at"] > TERMINAL_CACHE_SECONDS:
        settled = counts.by_status(
            sorted(TERMINAL_STATUSES),
            cap=counts.SETTLED_CAP,
            updated_since_ms=now - SETTLED_WINDOW_MS,
            organization_id=organization_id,
        )
        terminal = _terminal_cache[organization_id] = {"at": time.monotonic(), "counts": settled}
    active = counts.by_status(sorted(ACTIVE_STATUSES), organization_id=organization_id)
    found = {**terminal["counts"], **active}
    shown = {status: found.get(status, counts.Count(0)) for status in STATUSES}
    total = sum(shown.values(), counts.Count(0))
    return {
        "total": total.value,
        **{status: n.value for status, n in shown.items()},
        "capped": [status for status, n in shown.items() if n.capped],
        **_caps(),
        "updatedAt": now,
    }


def _caps() -> dict[str, int]:
    return {
        "countCap": counts.STATUS_CAP,
        "settledCap": counts.SETTLED_CAP,
        "settledWindowMs": SETTLED_WINDOW_MS,
    }


def queue_counts(
    *, organization_id: str | None = None, unavailable: str | None = None
) -> dict[str, Any]:
    """Jobs by status (A-8), of one organization or of all, at most QUEUE_CACHE_SECONDS
    old; never raises. With `unavailable` (the database's error) nothing is queried: the
    last counts, or none, with that error."""
    with _queue_lock:
        entry = _queue_cache.get(organization_id)
        cached = entry["block"] if entry else None
        if entry and time.monotonic() - entry["at"] < QUEUE_CACHE_SECONDS:
            return entry["block"]
        try:
            if unavailable:
                return _stale(cached, unavailable, organization_id)
            block = _count_queue(organization_id)
        except Exception as error:  # health answers whatever the database does
            return _stale(cached, type(error).__name__, organization_id)
        if organization_id is not None:
            block["organization"] = organization_id
        if len(_queue_cache) >= ORG_CACHE_MAX or len(_terminal_cache) >= ORG_CACHE_MAX:
            _queue_cache.clear()
            _terminal_cache.clear()
        _queue_cache[organization_id] = {"at": time.monotonic(), "block": block}
        return block


def _stale(
    cached: dict[str, Any] | None, error: str, organization_id: str | None
) -> dict[str, Any]:
    stale: dict[str, Any] = (
        dict(cached)
        if cached
        else {
            "total": None,
            **dict.fromkeys(STATUSES),
            "capped": [],
            **_caps(),
            "updatedAt": None,
        }
    )
    if organization_id is not None:
        stale["organization"] = organization_id
    return {**stale, "error": error}


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


def _supervised() -> tuple[list[str], list[str]]:
    """Children runstack's supervisor reports failing at startup (P-3): public and
    detailed wordings (the cause may name hosts or paths). Needs no database."""
    failing = supervision.failing_children(
        Path(settings.RECEIPT.data_dir) / supervision.STATUS_FILE
    )
    public = [
        f"the {entry.get('child')} process fails at startup every time; "
        "the runstack output names the cause"
        for entry in failing
    ]
    detailed = [
        f"{entry.get('child')} fails at startup every time: {entry.get('cause')}"
        for entry in failing
    ]
    return public, detailed


def _no_runtime(*warnings: str) -> dict[str, Any]:
    return {
        "loops": [],
        "clusters": [],
        "held": [],
        "public": list(warnings),
        "detailed": list(warnings),
    }


def _viewer(request: HttpRequest) -> Principal | None:
    try:
        return principal_for_request(request)
    except BadCredentials:  # a bad token gets the open answer, like no token
        return None


def _may_see_detail(viewer: Principal | None) -> bool:
    """An operator's credential: every organization, and allowed to read jobs (Q-2)."""
    return viewer is not None and viewer.organization_id is None and viewer.has_scope(DETAIL_SCOPE)


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


def _worker_groups(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    """Every worker group, built-in and declared, with its live runworker processes."""
    live = dict.fromkeys(current_timing().group_names(), 0)
    for cluster in runtime["clusters"]:
        if cluster["live"] and cluster.get("group") in live:
            live[cluster["group"]] += 1
    return [{"group": group, "liveProcesses": n} for group, n in live.items()]


def _ping() -> None:
    pool = getattr(connection, "pool", None)  # the ASGI process's psycopg pool, if any
    if pool is not None:
        # A probe must answer quickly while the database is down: not after the full
        # wait a request makes for a pooled connection (receipt_site.databases).
        pool.open()  # as Django does before its first connection; a no-op once open
        with pool.connection(timeout=PROBE_WAIT_S) as raw:
            raw.execute("SELECT 1")
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _database() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        target = redact_url(
            f"postgres://{db.get('USER') or ''}@{db.get('HOST')}:{db.get('PORT') or 5432}/{db['NAME']}"
        )
    else:
        target = f"sqlite:{db['NAME']}"
    found: dict[str, Any] = {"ok": True, "vendor": connection.vendor, "target": target}
    try:
        _ping()
    except Exception as error:  # health must answer whatever the database does
        found.update(ok=False, error=type(error).__name__)
    return found


def healthz(request: HttpRequest) -> JsonResponse:
    database = _database()
    down = None if database["ok"] else database.get("error", "error")
    runtime = _runtime() if down is None else _no_runtime(_DATABASE_DOWN)
    viewer = _viewer(request) if down is None else None
    detail = _may_see_detail(viewer)
    tenant = viewer.organization_id if viewer is not None else None
    warnings = runtime["detailed" if detail else "public"]
    warnings += _supervised()[1 if detail else 0]
    # "commands disabled: no sandbox" degrades; host mode, chosen on purpose, only warns
    commands = sandbox.status()
    degraded = bool(warnings) or not commands["enabled"]
    warnings += [commands["warning"]] if commands["warning"] else []
    body: dict[str, Any] = {
        "ok": True,
        "ready": database["ok"],
        "degraded": degraded,
        "warnings": warnings,
        "uptimeSec": int(time.monotonic() - _STARTED),
        "processRole": settings.RECEIPT.process_role or "api",
        "queue": queue_counts(organization_id=tenant, unavailable=down),
        "runtime": _counts(runtime),
        "workerGroups": _worker_groups(runtime),
        "database": database if detail else _without_target(database),
        "commands": {"sandbox": commands["sandbox"], "enabled": commands["enabled"]},
        "detail": detail,
    }
    if detail:
        body.update(
            loops=runtime["loops"], clusters=runtime["clusters"], heldByGone=runtime["held"]
        )
    return JsonResponse(body)


_DATABASE_DOWN = (
    "database unavailable: the API answers 503 database_unavailable until it answers again"
)


def _without_target(database: dict[str, Any]) -> dict[str, Any]:
    """The database block for an open answer: its target names the data directory."""
    return {key: value for key, value in database.items() if key != "target"}


def readyz(request: HttpRequest) -> JsonResponse:
    database = _database()
    detail = database["ok"] and _may_see_detail(_viewer(request))
    shown = database if detail else _without_target(database)
    return JsonResponse(
        {"ok": database["ok"], "database": shown}, status=200 if database["ok"] else 503
    )
