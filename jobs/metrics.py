"""`GET /metrics` in Prometheus text format (X-2). Needs a token with jobs:read (or a
staff session): every endpoint but health is authenticated (Q-1).

Job gauges are bounded counts (`jobs.counts`), so a scrape costs the same with any
number of jobs or any queue length: active jobs per (status, lane, group) series are
counted up to `receipt_jobs_count_cap` (a series at the cap means at least that many),
per status up to `receipt_jobs_status_count_cap`, settled jobs only in the last hour (up
to `counts.SETTLED_CAP` per status), and the oldest queued job's age per lane is exact. Counters are the per-process `jobs_counter`
rows summed. Callback gauges count the callback records (pending, and delivered or given
up in the last hour).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

from django.db.models import Sum
from django.http import HttpRequest, HttpResponse

from access import failures
from access.principals import BadCredentials, principal_for_request
from jobs import callbacks, counts
from jobs.api.errors import error_response
from jobs.core.vocabulary import ACTIVE_ORDER, TERMINAL_ORDER
from jobs.models import Counter, LoopRun
from jobs.runtime import counters, processes
from jobs.timing_config import current_timing
from receipts.clock import now_ms as wall_clock_ms

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HOUR_MS = 3_600_000
AUTH_FAILURES = "receipt_auth_failures_total"  # refused credentials by reason (issue 31)


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name: str, labels: dict[str, object], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value:g}" if inner else f"{name} {value:g}"


def _family(name: str, kind: str, help_text: str, lines: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]


def _gauge(
    name: str, help_text: str, samples: Iterable[tuple[dict[str, object], float]]
) -> list[str]:
    """A gauge family: one series per (labels, value) sample."""
    series = (_series(name, labels, value) for labels, value in samples)
    return _family(name, "gauge", help_text, series)


def render(now_ms: int, *, organization_id: str | None = None) -> str:
    """Every series; for an organization-bound caller only that organization's job
    gauges (processes, loops and counters are the platform's, not any organization's)."""
    out: list[str] = []
    cells = counts.active_cells(organization_id=organization_id)
    out += _gauge(
        "receipt_jobs_active",
        f"Active jobs by status, lane and routed group, counted up to {counts.CELL_CAP} "
        "per series: a series at receipt_jobs_count_cap means at least that many.",
        (({"status": c.status, "lane": c.lane, "group": c.group}, c.count.value) for c in cells),
    )
    out += _gauge(
        "receipt_jobs_count_cap",
        "Where the count of each receipt_jobs_active series stops.",
        [({}, counts.CELL_CAP)],
    )
    by_status = counts.by_status(ACTIVE_ORDER, organization_id=organization_id)
    out += _gauge(
        "receipt_jobs_active_by_status",
        f"Active jobs by status, counted up to {counts.STATUS_CAP}: a series at "
        "receipt_jobs_status_count_cap means at least that many.",
        (({"status": status}, n.value) for status, n in by_status.items()),
    )
    out += _gauge(
        "receipt_jobs_status_count_cap",
        "Where the count of each receipt_jobs_active_by_status series stops.",
        [({}, counts.STATUS_CAP)],
    )
    oldest: dict[str, int] = {}
    for c in cells:
        if c.oldest_created_at is not None:
            oldest[c.lane] = min(oldest.get(c.lane, c.oldest_created_at), c.oldest_created_at)
    out += _gauge(
        "receipt_jobs_oldest_queued_age_seconds",
        "Age of the oldest queued job, by lane (exact at any queue length).",
        (({"lane": lane}, max(0, now_ms - at) / 1000) for lane, at in sorted(oldest.items())),
    )
    settled = counts.by_status(
        TERMINAL_ORDER,
        cap=counts.SETTLED_CAP,
        updated_since_ms=now_ms - HOUR_MS,
        organization_id=organization_id,
    )
    out += _gauge(
        "receipt_jobs_settled_last_hour",
        f"Jobs settled in the last hour, counted up to {counts.SETTLED_CAP} per status.",
        (({"status": status}, n.value) for status, n in settled.items() if n.value),
    )
    if organization_id is not None:
        return "\n".join(out) + "\n"
    live = processes.live(now_ms=now_ms)
    roles = collections.Counter(row.role for row in live)
    out += _gauge(
        "receipt_worker_processes",
        "Live runworker processes by role.",
        (({"role": r}, n) for r, n in sorted(roles.items())),
    )
    groups = current_timing().group_names()
    slots = dict.fromkeys(groups, 0)
    for row in live:
        if row.group in slots:
            slots[row.group] += row.concurrency or 0
    out += _gauge(
        "receipt_worker_group_slots",
        "Worker slots (concurrency of live runworkers) per worker group, every built-in "
        "and declared group: 0 means no live runworker serves it.",
        (({"group": group}, n) for group, n in slots.items()),
    )
    loops = LoopRun.objects.values("loop", "process_id", "duration_ms", "last_finished_at")
    out += _gauge(
        "receipt_loop_last_duration_seconds",
        "Duration of the last pass of each recovery loop, per process.",
        (
            ({"loop": r["loop"], "process": r["process_id"]}, (r["duration_ms"] or 0) / 1000)
            for r in loops
        ),
    )
    out += _callbacks(now_ms)
    sums = Counter.objects.values("name", "labels").annotate(total=Sum("value")).order_by("name")
    by_name: dict[str, list[tuple[str, float]]] = {}
    for row in sums:
        by_name.setdefault(_family_of(row["name"]), []).append(
            (f"{row['name']}{{{row['labels']}}}" if row["labels"] else row["name"], row["total"])
        )
    auth = by_name.setdefault(AUTH_FAILURES, [])
    for reason in failures.REASONS:  # every reason from the start: rate() needs a series
        key = f'{AUTH_FAILURES}{{reason="{reason}"}}'
        if all(existing != key for existing, _ in auth):
            auth.append((key, 0.0))
    for name, series in by_name.items():
        if name in counters.HISTOGRAMS:
            lines = [f"{key} {total:g}" for key, total in sorted(series, key=_histogram_order)]
            out += _family(
                name,
                "histogram",
                "Seconds per store append, by stream family, "
                "summed over processes (flushed every few seconds).",
                lines,
            )
        else:
            out += _family(
                name,
                "counter",
                "Summed over processes (flushed every few seconds).",
                [f"{key} {total:g}" for key, total in series],
            )
    return "\n".join(out) + "\n"


def _callbacks(now_ms: int) -> list[str]:
    """D-8 from the callback records, so every process's callbacks count."""
    by_event = callbacks.counts(now_ms=now_ms)["byEvent"]
    out = _gauge(
        "receipt_callbacks_pending",
        "Callbacks waiting for delivery or a retry, by event.",
        (({"event": event}, cell["pending"]) for event, cell in by_event.items()),
    )
    out += _gauge(
        "receipt_callbacks_finished_last_hour",
        "Callbacks delivered or given up in the last hour, by event.",
        (
            ({"event": event, "state": state}, cell[key])
            for event, cell in by_event.items()
            for state, key in callbacks.FINISHED.items()
        ),
    )
    return out


def _family_of(series: str) -> str:
    """A histogram's `_bucket`, `_sum` and `_count` series belong to one family."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = series.removesuffix(suffix)
        if base != series and base in counters.HISTOGRAMS:
            return base
    return series


def _histogram_order(entry: tuple[str, float]) -> tuple[str, int, float]:
    """Per label set: buckets by bound (+Inf last), then _sum, then _count."""
    key = entry[0]
    labels = key[key.find("{") :] if "{" in key else ""
    bound = re.search(r'le="([^"]+)"', labels)
    rest = re.sub(r',?le="[^"]+"', "", labels)
    if bound:
        value = float("inf") if bound.group(1) == "+Inf" else float(bound.group(1))
        return rest, 0, value
    return rest, 1 if "_sum" in key else 2, 0.0


def count_auth_failure(reason: str) -> None:
    """access.failures' observer: one refused credential, by reason (issue 31)."""
    counters.incr(AUTH_FAILURES, reason=reason)
    counters.flush()  # at most every few seconds: an API process may never enqueue


def metrics(request: HttpRequest) -> HttpResponse:
    try:
        principal = principal_for_request(request)
    except BadCredentials as error:
        return error_response("invalid_token", str(error), 401)
    if principal is None:
        detail = "send Authorization: Bearer <token>"
        return error_response("not_authenticated", detail, 401, {"WWW-Authenticate": "Bearer"})
    if not principal.has_scope("jobs:read"):
        return error_response("missing_scope", "this token lacks the jobs:read scope", 403)
    counters.flush(force=True)  # this process's own counts, current to the scrape
    text = render(wall_clock_ms(), organization_id=principal.organization_id)
    return HttpResponse(text, content_type=CONTENT_TYPE)
