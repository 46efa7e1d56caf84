"""The dashboard's first paint: one spec per table, the cell formats, and the chart.

Each spec renders its table here and tells `static/receipt/dashboard.js` how to redraw it
from each /dashboard.json poll: `source` is a dotted path in the snapshot, each column a key
of its rows and a format both sides implement. Reads nothing: it formats a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from jobs.core import settled_chart
from jobs.core.diagnosis import human_ms
from jobs.core.groups import DECLARED_IN
from jobs.counts import CELL_CAP, STATUS_CAP
from receipts.admin import NONE_HTML, utc


def status_badge(status: str) -> str:
    return format_html('<span class="rcpt-job-badge rcpt-job-badge-{}">{}</span>', status, status)


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    # text | num | status | utc | ago | ms | live | job | jobs | len | usage (busy of slots)
    format: str = "text"


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    source: str
    columns: tuple[Column, ...]
    empty: str
    help: str = ""
    wide: bool = False  # spans two grid columns on a wide screen


CAP_HELP = (
    f"Each status, lane and group is counted up to {CELL_CAP:,} jobs, so the page costs the "
    f"same with any queue: {CELL_CAP:,}+ means at least that many, and a sum with a + is at "
    "least its value."
)
STATUS_HELP = (
    f"Each status is counted up to {STATUS_CAP:,} jobs: {STATUS_CAP:,}+ means at least that "
    "many. The oldest queued job per lane shows how far behind the queue is."
)

DASHBOARD_TABLES = (
    Table(
        "capacity",
        "Workers: busy of total slots per group",
        "capacity",
        (
            Column("group", "group"),
            Column("busy", "busy / slots", "usage"),
            Column("queuedShown", "queued", "num"),
            Column("processes", "processes", "num"),
            Column("state", "state"),
        ),
        "—",
        "Busy: leased or running jobs routed to the group. Slots: the concurrency of the "
        "group's live processes. " + CAP_HELP,
    ),
    Table(
        "groups",
        "Worker groups: settings and connections",
        "workerGroups.groups",
        (
            Column("group", "group"),
            Column("concurrency", "concurrency", "num"),
            Column("leaseMs", "lease", "ms"),
            Column("executionTimeoutMs", "timeout", "ms"),
            Column("connectionsPerRunworker", "connections per runworker", "num"),
        ),
        "—",
        f"The built-in groups, then those declared in {DECLARED_IN}. Lease and "
        "timeout of a plain job (Factory's agents have their own). Each runworker holds "
        "concurrency + 3 PostgreSQL connections; size max_connections with their sum over "
        "every runworker (driver: 4), plus the API's pools.",
    ),
    Table(
        "limits",
        "Limits: rates and concurrency caps",
        "limits",
        (
            Column("limit", "limit"),
            Column("covers", "covers"),
            Column("part", "limit part"),
            Column("key", "key"),
            Column("busy", "in use", "usage"),
            Column("held", "held", "num"),
        ),
        "No limit is declared (RECEIPT_LIMITS).",
        "A rate's row: starts in the current window of its period. A cap's rows: the "
        "busiest keys (up to 5), running of the cap. Held: deliveries the limit holds "
        "back, counted up to 1,000; a held job stays queued and starts when the limit "
        "has room.",
        wide=True,
    ),
    Table(
        "by-status",
        "Active jobs by status",
        "depth.byStatus",
        (Column("status", "status", "status"), Column("shown", "jobs", "num")),
        "No active jobs.",
        STATUS_HELP,
    ),
    Table(
        "queued",
        "Queued jobs: ready and scheduled",
        "depth.queued",
        (Column("state", "queued"), Column("shown", "jobs", "num")),
        "Nothing queued.",
        "Scheduled: delayed jobs whose time is still ahead; they are not dispatched before "
        f"it. Ready: every other queued job. Each is counted up to {STATUS_CAP:,}.",
    ),
    Table(
        "oldest",
        "Oldest queued job per lane",
        "depth.oldestQueued",
        (
            Column("lane", "lane"),
            Column("jobId", "job", "job"),
            Column("createdAt", "enqueued", "ago"),
        ),
        "Nothing queued.",
    ),
    Table(
        "throughput",
        "Throughput (settled jobs)",
        "recent.throughput",
        (
            Column("window", "last"),
            Column("completed", "completed", "num"),
            Column("failed", "failed", "num"),
            Column("canceled", "canceled", "num"),
            Column("total", "total", "num"),
            Column("perMinute", "per minute"),
        ),
        "—",
        "Counted by the time of each job's last receipt.",
    ),
    Table(
        "depth",
        "Queue depth: status, lane and routed group",
        "depth.cells",
        (
            Column("status", "status", "status"),
            Column("lane", "lane"),
            Column("group", "routed group"),
            Column("shown", "jobs", "num"),
        ),
        "No active jobs.",
        "Active statuses only (queued, leased, running). " + CAP_HELP,
    ),
    Table(
        "recent",
        "Settled in the last 60 minutes",
        "recent.cells",
        (
            Column("status", "status", "status"),
            Column("lane", "lane"),
            Column("group", "routed group"),
            Column("count5m", "last 5 min", "num"),
            Column("count", "last 60 min", "num"),
        ),
        "No job settled in the last hour.",
    ),
    Table(
        "clusters",
        "Running jobs per cluster",
        "runningByCluster",
        (
            Column("cluster", "cluster"),
            Column("leasedShown", "leased", "num"),
            Column("runningShown", "running", "num"),
            Column("totalShown", "total", "num"),
        ),
        "—",
        CAP_HELP,
    ),
    Table(
        "roles",
        "Worker processes per role",
        "processes.byRole",
        (
            Column("role", "role"),
            Column("live", "live", "num"),
            Column("gone", "gone", "num"),
            Column("concurrency", "live concurrency", "num"),
        ),
        "No runworker process seen in the last 5 minutes.",
        "A process unseen for 3 beats (15 s) is gone.",
    ),
    Table(
        "held",
        "Jobs held by gone processes",
        "heldByGone",
        (
            Column("process", "gone process"),
            Column("lastSeen", "last seen", "ago"),
            Column("jobs", "jobs held", "num"),
            Column("jobIds", "jobs (first 20)", "jobs"),
        ),
        "No job is held by a gone process.",
        "A live worker releases a gone process's leases within seconds; a row here means "
        "none has yet, so these jobs wait for their leases to run out.",
    ),
    Table(
        "processes",
        "Processes",
        "processes.rows",
        (
            Column("id", "process"),
            Column("live", "state", "live"),
            Column("group", "group"),
            Column("concurrency", "concurrency", "num"),
            Column("currentAttempts", "attempts held", "len"),
            Column("startedAt", "started (UTC)", "utc"),
            Column("lastSeen", "last seen", "ago"),
        ),
        "No runworker process seen in the last 5 minutes.",
        wide=True,
    ),
    Table(
        "loops",
        "Recovery loops",
        "loops",
        (
            Column("loop", "loop"),
            Column("process", "process"),
            Column("lastStartedAt", "last run (UTC)", "utc"),
            Column("durationMs", "duration", "ms"),
            Column("acted", "acted", "num"),
            Column("runs", "runs", "num"),
            Column("lastError", "last error"),
            Column("lastErrorAt", "error at (UTC)", "utc"),
        ),
        "No loop has run in a live process yet.",
        "Loops of live processes only.",
        wide=True,
    ),
)


def usage_cell(busy: int, slots: int, shown: str | None = None) -> str:
    """ "3 / 4" with a bar; busy jobs with no slot at all fill it red. `shown` is the busy
    count as text when it may be capped ("100+")."""
    shown = shown or str(busy)
    percent = 100 if slots == 0 and busy else min(100, round(100 * busy / slots)) if slots else 0
    over = " rcpt-usage-over" if busy > slots else ""
    return format_html(
        '<span class="rcpt-usage{}" title="{} busy of {} slots"><span class="rcpt-usage-fill" '
        'style="width: {}%"></span></span> {} / {}',
        over,
        shown,
        slots,
        percent,
        shown,
        slots,
    )


def format_cell(value: Any, fmt: str, *, now_ms: int, row: dict[str, Any] | None = None) -> str:
    if fmt == "len":
        return str(len(value or []))
    if fmt == "usage":
        row = row or {}
        return usage_cell(value or 0, row.get("slots") or 0, row.get("busyShown"))
    if value is None or value == "":
        return NONE_HTML
    if fmt == "num":
        return f"{value:,}" if isinstance(value, int) else str(value)
    if fmt == "status":
        return status_badge(value)
    if fmt == "utc":
        return format_html('<span title="{}">{}</span>', value, utc(value))
    if fmt == "ms":
        return human_ms(value)
    if fmt == "ago":
        return format_html('<span title="{}">{} ago</span>', utc(value), human_ms(now_ms - value))
    if fmt == "live":
        return status_badge("live" if value else "gone")
    if fmt == "job":
        url = reverse("admin:jobs_job_change", args=(quote(value),))
        return format_html('<a href="{}"><code>{}</code></a>', url, value)
    if fmt == "jobs":
        return format_html_join(
            ", ", "{}", ((format_cell(v, "job", now_ms=now_ms),) for v in value)
        )
    return str(value)


def render_table(table: Table, data: dict[str, Any]) -> dict[str, Any]:
    rows: Any = data
    for part in table.source.split("."):
        rows = rows.get(part, []) if isinstance(rows, dict) else []
    cells = [
        [
            (c.format, format_cell(row.get(c.key), c.format, now_ms=data["now"], row=row))
            for c in table.columns
        ]
        for row in rows
    ]
    return {"spec": table, "rows": cells}


def render_chart(data: dict[str, Any]) -> dict[str, Any]:
    """The settled-per-minute chart's first paint (dashboard.js redraws it)."""
    chart = data["settledPerMinute"]
    minutes = [
        {
            "minute": minute,
            "title": f"{utc(minute.at_ms)[11:16]} UTC: "
            + ", ".join(f"{n} {status}" for status, n in minute.counts.items()),
        }
        for minute in settled_chart.layout(chart["buckets"])
    ]
    return {
        "minutes": minutes,
        "peak": settled_chart.peak(chart["buckets"]),
        "width": settled_chart.WIDTH,
        "top": settled_chart.TOP,
        "height": settled_chart.HEIGHT,
        "baseline": settled_chart.TOP + settled_chart.PLOT_HEIGHT,
        "stack": settled_chart.STACK,
        "last_hour": data["recent"]["throughput"][1],
    }
