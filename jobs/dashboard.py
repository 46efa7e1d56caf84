"""Selectors for the operator dashboard (U-6): one JSON snapshot of the queue and runtime.

Every query reads a bounded number of index entries at any table size or queue length:

- Queued jobs are split into ready and scheduled (delayed, G-3): the scheduled ones are
  a bounded count on the scheduled index of their driver promises.
- Queue depth is one probe per (status, lane, routed group) cell of `job_active_cells`,
  each count stopped at `counts.CELL_CAP` + 1 (`jobs.counts.active_cells`); a cell that
  reached it reads "100+", and any sum it feeds reads "N+" (at least N). Active jobs by
  status are counted apart, up to `counts.STATUS_CAP` ("1,000+") each.
- The oldest queued job per lane (id and enqueue time) comes from the same statement:
  the first entry of each queued cell.
- Terminal jobs are counted only inside the last hour, by `updated_at` range under
  each terminal status (`job_status_updated`). `updated_at` is the ts of a job's last
  receipt, which for a settled job is its settlement (later receipts are rare and inert).
  These grow with the last hour's throughput, not with the stored history.
- The last hour's chart is one more GROUP BY on the same range, by minute of
  `updated_at` and terminal status.
- Capacity per worker group adds no job query: busy and queued come from the depth
  cells, slots from the live rows of the worker registry. Every group is listed, the
  built-in three and those the deployment declares, with the settings its runworkers use
  and the connections they hold.

The snapshot is plain JSON (camelCase, ms since epoch) so the admin's live refresh and
any `/healthz`-like consumer can share it. A bounded count carries its value (`count`,
at least that many when `capped`) and the text to show (`shown`). This module reads; it
never writes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Q

from jobs import callbacks, counts, index_walks, limits, queues, selectors
from jobs.core.diagnosis import slot_state
from jobs.core.groups import BUILTIN_GROUPS
from jobs.core.names import worker_cluster
from jobs.core.timing import concurrency_for, execution_timeout_ms
from jobs.core.vocabulary import ACTIVE_ORDER, LANES, TERMINAL_ORDER
from jobs.runtime import loops, processes, promises, sandbox
from jobs.runtime.roles import connection_budget, connections_per_runworker
from jobs.timing_config import current_timing
from receipts import admin_log
from receipts import log as receipt_log
from receipts.clock import now_ms as wall_clock_ms

RECENT_MS = 60 * 60_000  # terminal counts and throughput: the last 60 minutes
SHORT_MS = 5 * 60_000  # ...and the last 5 minutes
BUCKET_MS = 60_000  # the chart's bar: one minute of the last hour


def queue_depth(*, now_ms: int) -> dict[str, Any]:
    """Active jobs by status x lane x routed group and by status (each counted up to its
    cap), their total, and the oldest queued job per lane."""
    found = counts.active_cells()
    totals = counts.by_status(ACTIVE_ORDER)
    cells = [
        {"status": c.status, "lane": c.lane, "group": c.group, **_bounded(c.count)} for c in found
    ]
    oldest: dict[str, tuple[int, str]] = {}
    for cell in found:
        if cell.oldest_created_at is not None and cell.oldest_id is not None:
            first = (cell.oldest_created_at, cell.oldest_id)
            oldest[cell.lane] = min(oldest.get(cell.lane, first), first)
    _sort_cells(cells, ACTIVE_ORDER)
    total = sum(totals.values(), counts.Count(0))
    return {
        "queued": queued_split(totals.get("queued", counts.Count(0)), now_ms=now_ms),
        "cells": cells,
        "byStatus": [{"status": status, **_bounded(n)} for status, n in totals.items()],
        "total": total.value,
        "totalCapped": total.capped,
        "totalShown": total.shown,
        "cellCap": counts.CELL_CAP,
        "statusCap": counts.STATUS_CAP,
        "oldestQueued": [
            {
                "lane": lane,
                "jobId": job_id,
                "createdAt": created,
                "ageMs": max(0, now_ms - created),
            }
            for lane, (created, job_id) in sorted(
                oldest.items(), key=lambda item: _rank(LANES, item[0])
            )
        ],
    }


def queued_split(queued: counts.Count, *, now_ms: int) -> list[dict[str, Any]]:
    """Queued jobs split into ready (may start now) and scheduled (delayed, their time
    still ahead: G-3). Scheduled jobs are counted up to STATUS_CAP on the scheduled index of
    their promises, never scanned; ready ones are the rest of the queued count, which is
    unknown ("—") only when both counts stopped at their caps."""
    scheduled = counts.Count.of(
        promises.count_scheduled(now_ms=now_ms, cap=counts.STATUS_CAP), counts.STATUS_CAP
    )
    ready: dict[str, Any]
    if scheduled.capped and queued.capped:
        ready = {"count": None, "capped": False, "shown": "—"}
    else:
        ready = _bounded(counts.Count(max(0, queued.value - scheduled.value), queued.capped))
    return [{"state": "ready", **ready}, {"state": "scheduled", **_bounded(scheduled)}]


def _bounded(count: counts.Count) -> dict[str, Any]:
    """A bounded count on the wire: `count` (at least that many when `capped`) and the
    text every page shows for it."""
    return {"count": count.value, "capped": count.capped, "shown": count.shown}


def recent_terminal(*, now_ms: int) -> dict[str, Any]:
    """Jobs that settled in the last hour (and last 5 minutes) by status x lane x group."""
    since_long, since_short = now_ms - RECENT_MS, now_ms - SHORT_MS
    with index_walks.walking():  # each range read in order, never through a bitmap
        rows = [
            row
            for settled in selectors.settled_since(since_long)
            for row in settled.values("status", "lane", "worker_group").annotate(
                count=Count("id"), recent=Count("id", filter=Q(updated_at__gte=since_short))
            )
        ]
    cells = []
    last_hour: dict[str, int] = dict.fromkeys(TERMINAL_ORDER, 0)
    last_5: dict[str, int] = dict.fromkeys(TERMINAL_ORDER, 0)
    for row in rows:
        cells.append(
            {
                "status": row["status"],
                "lane": row["lane"],
                "group": row["worker_group"],
                "count": row["count"],
                "count5m": row["recent"],
            }
        )
        last_hour[row["status"]] += row["count"]
        last_5[row["status"]] += row["recent"]
    _sort_cells(cells, TERMINAL_ORDER)
    return {
        "windowMs": RECENT_MS,
        "since": since_long,
        "cells": cells,
        "throughput": [_throughput(SHORT_MS, last_5), _throughput(RECENT_MS, last_hour)],
    }


def _throughput(window_ms: int, by_status: dict[str, int]) -> dict[str, Any]:
    minutes, total = window_ms // 60_000, sum(by_status.values())
    return {
        "window": f"{minutes}m",
        "windowMs": window_ms,
        **by_status,
        "total": total,
        "perMinute": round(total / minutes, 2),
    }


def _sort_cells(cells: list[dict[str, Any]], statuses: tuple[str, ...]) -> None:
    """In the order of `statuses`, lanes and the deployment's worker groups."""
    groups = current_timing().group_names()
    cells.sort(
        key=lambda c: (
            _rank(statuses, c["status"]),
            _rank(LANES, c["lane"]),
            _rank(groups, c["group"]),
        )
    )


def settled_per_minute(*, now_ms: int) -> dict[str, Any]:
    """Jobs settled in each minute of the last hour, by terminal status, oldest minute
    first: the dashboard's throughput and failures chart."""
    since = now_ms - RECENT_MS
    minute = ExpressionWrapper(
        (F("updated_at") - since) / BUCKET_MS, output_field=BigIntegerField()
    )  # integer division on both databases; updated_at >= since, so it floors
    with index_walks.walking():
        rows = [
            row
            for settled in selectors.settled_since(since)
            for row in settled.annotate(minute=minute)
            .values("minute", "status")
            .annotate(count=Count("id"))
        ]
    count = RECENT_MS // BUCKET_MS
    buckets = [
        {"at": since + i * BUCKET_MS, **dict.fromkeys(TERMINAL_ORDER, 0)} for i in range(count)
    ]
    for row in rows:
        # a receipt stamped a little after `now` (another process's clock) joins the last bar
        buckets[min(max(int(row["minute"]), 0), count - 1)][row["status"]] += row["count"]
    return {
        "since": since,
        "bucketMs": BUCKET_MS,
        "statuses": list(TERMINAL_ORDER),
        "buckets": buckets,
    }


def running_by_cluster(depth: dict[str, Any]) -> list[dict[str, Any]]:
    """Leased and running jobs per worker cluster (`worker-<routed group>`), from the depth
    (bounded counts: `...Shown` reads "100+" when a cell reached the cap)."""
    zero = counts.Count(0)
    groups = current_timing().group_names()
    by_group = {group: {"leased": zero, "running": zero} for group in groups}
    for cell in depth["cells"]:
        if cell["status"] in ("leased", "running"):
            row = by_group.setdefault(cell["group"], {"leased": zero, "running": zero})
            row[cell["status"]] = row[cell["status"]] + counts.Count(cell["count"], cell["capped"])
    out = []
    for group, row in by_group.items():
        total = row["leased"] + row["running"]
        out.append(
            {
                "cluster": worker_cluster(group),
                "group": group,
                "leased": row["leased"].value,
                "running": row["running"].value,
                "total": total.value,
                "leasedShown": row["leased"].shown,
                "runningShown": row["running"].shown,
                "totalShown": total.shown,
            }
        )
    return out


def capacity(depth: dict[str, Any], *, now_ms: int) -> list[dict[str, Any]]:
    """Busy slots against live slots per worker group (what D-12's waiting_for_capacity sees).

    busy = leased + running jobs routed to the group; slots = concurrency summed over the
    group's live processes (D-11); queued = the group's queued jobs, all from the depth
    (bounded counts: at least the value when capped).
    """
    groups = current_timing().group_names()
    slots = dict.fromkeys(groups, 0)
    live = dict.fromkeys(groups, 0)
    for process in processes.live(now_ms=now_ms):
        if process.group in slots:
            slots[process.group] += process.concurrency or 0
            live[process.group] += 1
    busy = {group: counts.Count(0) for group in groups}
    queued = {group: counts.Count(0) for group in groups}
    paused = {row.name: row.paused_by for row in queues.paused_groups()}  # a handful of rows
    for cell in depth["cells"]:
        into = queued if cell["status"] == "queued" else busy  # depth: active statuses only
        if cell["group"] in into:
            into[cell["group"]] = into[cell["group"]] + counts.Count(cell["count"], cell["capped"])
    return [
        {
            "group": group,
            "busy": busy[group].value,
            "busyShown": busy[group].shown,
            "slots": slots[group],
            "queued": queued[group].value,
            "queuedShown": queued[group].shown,
            "processes": live[group],
            # a paused group starts nothing: that is its state, whatever its slots
            "state": f"paused by {paused[group]}"
            if group in paused
            else slot_state(busy=busy[group].value, slots=slots[group]),
            "paused": group in paused,
        }
        for group in groups
    ]


LIMITS_SHOWN = 50  # limits on the dashboard; KEYS_SHOWN busiest keys of each cap
KEYS_SHOWN = 5


def limits_block(*, now_ms: int) -> list[dict[str, Any]]:
    """Each declared limit and how full it is: a row for its rate (starts in the current
    window of N) and one per busiest key of its cap (running of K), each with the
    deliveries it holds. Bounded reads: see `jobs.limits.usage`."""
    rows: list[dict[str, Any]] = []
    for limit in limits.declared()[:LIMITS_SHOWN]:
        shown = limits.usage(limit, now_ms=now_ms, keys=KEYS_SHOWN)
        base = {"limit": limit.name, "covers": shown["covers"]}
        if "rate" in shown:
            rate = shown["rate"]
            part = {"part": f"rate {rate['text']}", "key": "—", "held": rate["held"]}
            rows.append({**base, **part, **_usage(rate["used"], rate["of"])})
        if "concurrency" in shown:
            cap = shown["concurrency"]
            label = f"{cap['of']} at once" + (f" per {cap['key']}" if cap["key"] else "")
            busiest = cap["busiest"] or [{"key": None, "running": 0}]
            for entry in busiest:
                key = entry["key"] if entry["key"] is not None else "—"
                part = {"part": f"cap {label}", "key": key, "held": cap["held"]}
                rows.append({**base, **part, **_usage(entry["running"], cap["of"])})
    return rows


def _usage(busy: int, slots: int) -> dict[str, Any]:
    return {"busy": busy, "slots": slots, "busyShown": str(busy)}


def worker_groups_block() -> dict[str, Any]:
    """Every worker group with the settings its runworkers use, built-in and declared,
    and the PostgreSQL connections its runworkers hold (no query)."""
    timing = current_timing()
    rows = []
    for group in timing.group_names():
        declared = timing.declared(group)
        lease = declared.lease_ms if declared and declared.lease_ms else timing.job_lease_ms
        rows.append(
            {
                "group": group,
                "builtIn": group in BUILTIN_GROUPS,
                "concurrency": concurrency_for(group, timing),
                # the lease and timeout of a plain job; Factory's agents have their own
                "leaseMs": lease,
                "executionTimeoutMs": execution_timeout_ms(lease, None, timing, group=group),
                "connectionsPerRunworker": connections_per_runworker(group, timing),
            }
        )
    return {
        "groups": rows,
        "driverConnectionsPerRunworker": connections_per_runworker("driver", timing),
        "connectionsOneRunworkerPerRole": connection_budget(timing),
    }


def processes_block(*, now_ms: int) -> dict[str, Any]:
    """D-11: processes seen recently, and live/gone counts per role."""
    rows = processes.summary(now_ms=now_ms)
    roles: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = roles.setdefault(
            row["role"], {"role": row["role"], "live": 0, "gone": 0, "concurrency": 0}
        )
        if row["live"]:
            entry["live"] += 1
            entry["concurrency"] += row["concurrency"] or 0
        else:
            entry["gone"] += 1
    return {"byRole": sorted(roles.values(), key=lambda r: r["role"]), "rows": rows}


def callbacks_block(*, now_ms: int | None = None) -> dict[str, Any]:
    """D-8 configuration; with `now_ms`, the counts of the callback records too (rows
    every process writes, so they are the whole deployment's)."""
    config = settings.RECEIPT
    block: dict[str, Any] = {
        "url": callbacks.mask_url(config.callback_url),
        "source": (
            "RECEIPT_RESONATE_CALLBACK_URL"
            if config.resonate_callback_url
            else "RECEIPT_EVENT_CALLBACK_URL"
            if config.event_callback_url
            else None
        ),
        "tokenSet": bool(config.callback_token),
        "events": list(callbacks.EVENTS),
    }
    if now_ms is not None:
        block["records"] = callbacks.counts(now_ms=now_ms)
    return block


CALLBACK_URL_NAMES = ("RECEIPT_RESONATE_CALLBACK_URL", "RECEIPT_EVENT_CALLBACK_URL")


def config_rows() -> list[dict[str, str]]:
    """Every setting with its value, secrets masked (Config.shown).

    `shown()` strips passwords from URLs and cuts callback URLs to their origin; here a
    callback URL reads as it does on a job's page and in the API (`mask_url`:
    `https://host/••••`), since webhook URLs routinely embed their token.
    """
    rows = []
    for name, value in settings.RECEIPT.shown():
        if name in CALLBACK_URL_NAMES and value != "—":
            value = callbacks.mask_url(value) or value
        rows.append({"name": name, "value": value})
    return rows


def log_block(*, now_ms: int) -> dict[str, Any]:
    """The store-wide log: how many receipts it holds, and its latest checkpoint's number,
    size and age (a checkpoint every minute with new receipts, by default)."""
    latest = admin_log.latest(now_ms=now_ms)
    block: dict[str, Any] = {"leaves": receipt_log.head().size, "checkpoint": None}
    if latest is not None:
        seconds = latest.age_ms // 1000
        block["checkpoint"] = {
            "number": latest.number,
            "treeSize": latest.tree_size,
            "ageMs": latest.age_ms,
            "ageText": f"{seconds} s" if seconds < 120 else f"{seconds // 60} min",
            "signed": latest.signed,
        }
    return block


def snapshot(*, now_ms: int | None = None, include_config: bool = True) -> dict[str, Any]:
    """Everything the dashboard shows, as JSON."""
    now = wall_clock_ms() if now_ms is None else now_ms
    depth = queue_depth(now_ms=now)
    workers = processes_block(now_ms=now)
    out: dict[str, Any] = {
        "now": now,
        "depth": depth,
        "recent": recent_terminal(now_ms=now),
        "settledPerMinute": settled_per_minute(now_ms=now),
        "runningByCluster": running_by_cluster(depth),
        "capacity": capacity(depth, now_ms=now),
        "workerGroups": worker_groups_block(),
        "limits": limits_block(now_ms=now),
        "processes": workers,
        # L-6: a gone process's loop rows describe loops nobody runs any more
        "loops": loops.summary(process_ids=[r["id"] for r in workers["rows"] if r["live"]]),
        "heldByGone": processes.held_by_gone(now_ms=now),
        "callbacks": callbacks_block(now_ms=now),
        "commands": sandbox.status(),  # how task commands run in this process's host
        "log": log_block(now_ms=now),
    }
    if include_config:
        out["config"] = config_rows()
    return out


# Every open dashboard polls every 3 s; one snapshot per process serves them all for
# SHARED_SECONDS, so ten operators cost the database what one does.
SHARED_SECONDS = 2.0
_shared_lock = threading.Lock()
_shared: dict[str, Any] = {}  # {"at": monotonic seconds, "snapshot": {...}}


def shared_snapshot() -> dict[str, Any]:
    """`snapshot()` without the configuration, at most SHARED_SECONDS old."""
    with _shared_lock:
        cached = _shared.get("snapshot")
        if cached is not None and time.monotonic() - _shared["at"] < SHARED_SECONDS:
            return cached
        fresh = snapshot(include_config=False)
        _shared.update(at=time.monotonic(), snapshot=fresh)
        return fresh


def reset_shared() -> None:
    with _shared_lock:
        _shared.clear()


def _rank(order: tuple[str, ...], value: str) -> tuple[int, str]:
    return (order.index(value), "") if value in order else (len(order), value or "")
