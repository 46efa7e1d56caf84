"""The jobs list (U-1): filters, search, columns, the page cap, and the dashboard beside it
(U-6). Nothing here writes.

The list stays on an index at a million jobs: filter choices from code (the agent list
adds a loose index scan of `job_agent_newest`, never a DISTINCT over the table),
exact-match search, newest-first on `job_newest`, and the streams browser's paginator,
which never counts a whole table.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.apps import apps
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db import connections
from django.db.models import Case, Q, QuerySet, When
from django.db.models.fields.json import KT
from django.db.models.functions import Substr
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from jobs import dashboard, handlers, index_walks, selectors
from jobs.core.contracts import all_kinds, contract_group, routed_group, routing_by_design
from jobs.core.vocabulary import LANES, STATUSES
from jobs.dashboard_tables import DASHBOARD_TABLES, render_chart, render_table, status_badge
from jobs.models import Job
from jobs.tasks import payload as task_payload
from jobs.timing_config import current_timing
from receipts.admin import CheapCountPaginator
from receipts.admin_kit import NONE_HTML, OperatorAdmin, require, titled, utc
from receipts.clock import now_ms as wall_clock_ms

ERROR_TOOLTIP_CHARS = 600  # of a job's last error, read for the changelist's tooltip
# Search terms `<prefix>:<value>`: one exact column each. A bare term matches id,
# session key or objective id exactly (three indexed equality lookups, OR-ed).
SEARCH_PREFIXES = {
    "id": "id",
    "session": "session_key",
    "objective": "objective_id",
    "org": "organization_id",
    "organization": "organization_id",
    "agent": "agent_id",
}


def group_cell(routed: str, contract: str | None, *, by_design: bool = False) -> str:
    """The routed group, flagged when the kind's contract names another group (K-5); a
    difference the built-in agents make by design is a quiet note, not a warning."""
    if contract is None or contract == routed:
        return format_html("{}", routed)
    if by_design:  # in the tooltip only: a chip on every such row would crowd the list
        return format_html(
            '<span class="rcpt-route-quiet" title="contract group {}; built-in agents '
            'route by agent id first, so this is expected">{}</span>',
            contract,
            routed,
        )
    return format_html(
        '{} <span class="rcpt-mismatch" title="contract group {} differs from routed group {} '
        '(routing is by agent id first)">⚠ contract {}</span>',
        routed,
        contract,
        routed,
        contract,
    )


# `error:<start>`: failed and retrying (queued) jobs whose last error starts with the text,
# case as written, at most ERROR_PREFIX_CHARS of it. On PostgreSQL two partial indexes hold
# exactly the jobs with an error (migration 0022): job_error_prefix, whose expression is
# error_prefix() to the letter, and job_errors_newest. A search first gathers up to the
# list's count cap + 1 matches from the prefix's range: fewer, and they are the whole
# answer, sorted; as many, and matches are common enough that a newest-first walk of the
# jobs with an error fills a page after a few rows (and the list says "more than" the cap
# without counting them again). Either way the rows read do not grow with N.
ERROR_PREFIX_CHARS = 100
ERRORS_PAST_CAP = "receipt_errors_past_cap"  # set on the request by JobChangeList
ERROR_STATUSES = ("failed", "queued")


def error_prefix() -> Substr:
    return Substr(KT("state__lastError"), 1, ERROR_PREFIX_CHARS)


def has_error(vendor: str, alias: str) -> Q:
    """The rows whose `alias` (the fold's lastError, as text) holds an error. A JSON null
    reads as NULL through PostgreSQL's `->>` (whose `json` column has no JSON equality to
    test it with) but as the text 'null' through SQLite's KT."""
    if vendor == "postgresql":
        return Q(**{f"{alias}__isnull": False})
    return ~Q(state__lastError=None)


def error_start(term: str) -> str | None:
    """`error:Timeout` -> "Timeout", cut to the indexed prefix; None for any other term."""
    prefix, sep, value = term.strip().partition(":")
    if sep and prefix.lower() == "error" and value.strip():
        return value.strip()[:ERROR_PREFIX_CHARS]
    return None


def errors_starting(rows: QuerySet[Job], start: str) -> QuerySet[Job]:
    """The failed and retrying jobs of `rows` whose last error starts with `start`."""
    return rows.alias(error_text=KT("state__lastError"), error_prefix=error_prefix()).filter(
        has_error(connections[rows.db].vendor, "error_text"),
        status__in=ERROR_STATUSES,
        error_prefix__startswith=start,
    )


def few_errors(rows: QuerySet[Job], start: str) -> list[str] | None:
    """The ids of every job whose last error starts with `start`, gathered from the prefix
    index, or None when there are more than the list counts (JobPaginator.filtered_cap)."""
    most = JobPaginator.filtered_cap
    with index_walks.walking(index_walks.GATHER):
        gathered = errors_starting(rows.order_by(), start).values_list("pk", flat=True)
        ids = list(gathered[: most + 1])
    return ids if len(ids) <= most else None


def column_search(term: str) -> tuple[str, str] | None:
    """`org:acme` -> (organization_id, acme): a search of one exact column, which the
    changelist narrows by as it does by a filter; None for any other term."""
    prefix, sep, value = term.strip().partition(":")
    if sep and prefix.lower() in SEARCH_PREFIXES and value.strip():
        return SEARCH_PREFIXES[prefix.lower()], value.strip()
    return None


def bare_search(term: str) -> Q | None:
    """A bare term -> id, session key or objective id; None for an empty term or one a
    column or the error search takes (JobChangeList narrows by those)."""
    term = term.strip()
    if not term or column_search(term) or error_start(term):
        return None
    return Q(pk=term) | Q(session_key=term) | Q(objective_id=term)


# ---- filters: choices from the vocabulary, the contracts and the agent index ---------------


class ColumnFilter(admin.SimpleListFilter):
    """One exact column. The filter narrows nothing itself: JobChangeList narrows by every
    chosen filter at once (`jobs.index_walks`: one leads the walk, the others are tested
    per row), which a filter seeing only its own column cannot do."""

    column: str

    def chosen(self) -> str | None:
        return (self.value() or "").strip() or None

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset


class FixedChoicesFilter(ColumnFilter):
    """One exact column against a list known in code: no query builds the choices."""

    known: tuple[str, ...] = ()  # (`choices` is a ListFilter method)

    def values(self) -> tuple[str, ...]:
        return self.known

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in self.values()]


class StatusFilter(FixedChoicesFilter):
    title, parameter_name, column = "status", "status", "status"
    known = tuple(STATUSES)


class LaneFilter(FixedChoicesFilter):
    title, parameter_name, column = "lane", "lane", "lane"
    known = tuple(LANES)


class AgentFilter(FixedChoicesFilter):
    """Agent ids with a handler or with jobs, so a failing unknown agent can be picked too.
    Past the index scan's cap, any other id is reached through the search `agent:<id>`."""

    title, parameter_name, column = "agent", "agent", "agent_id"

    def values(self) -> tuple[str, ...]:
        return tuple(sorted({*handlers.registered_agent_ids(), *selectors.agent_ids()}))


class KindFilter(FixedChoicesFilter):
    """The built-in kinds and the deployment's own, registered with its handlers."""

    title, parameter_name, column = "kind", "kind", "kind"

    def values(self) -> tuple[str, ...]:
        return all_kinds()


class RoutedGroupFilter(FixedChoicesFilter):
    """The built-in worker groups and those the deployment declares."""

    title, parameter_name, column = "routed group", "group", "worker_group"

    def values(self) -> tuple[str, ...]:
        return current_timing().group_names()


class OrganizationFilter(ColumnFilter):
    """A text box: organization ids are open-ended, so there is no list to offer."""

    title, parameter_name, column = "organization", "org", "organization_id"
    template = "admin/jobs/job/input_filter.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return []

    def has_output(self) -> bool:
        return True

    def choices(self, changelist: Any) -> Any:
        keep = [
            (name, value)
            for name, values in changelist.filter_params.items()
            if name != self.parameter_name
            for value in values
        ]
        yield {
            "value": self.value() or "",
            "parameter_name": self.parameter_name,
            "keep": keep,
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }


class JobPaginator(CheapCountPaginator):
    """At most `max_pages` pages: a deeper page is an OFFSET that walks (or, on PostgreSQL,
    sorts) every row before it. Older jobs are reached by filtering, not by paging.

    A filtered count keeps the page's order, so it walks the index the page walks and
    stops at cap + 1 (unordered, the planner may read a filter's whole range first). Its
    cap is ten pages: a count reads a row per job it counts (the filters other than the
    leading one are tested on the row), and at 10,000 that was the costliest read of a
    filtered list at a million jobs, where a thousand jobs never reach it. Past it the
    list says "more than 1,000" and links eleven pages; narrow the filters for older jobs.
    """

    max_pages = 100
    filtered_cap = 1_000
    past_cap = False  # already known to hold more than filtered_cap rows (no count needed)

    @cached_property
    def _measured(self) -> tuple[int, str]:
        rows = self.object_list
        if self.past_cap:
            return self.filtered_cap + 1, "more_than"
        if not isinstance(rows, QuerySet) or not rows.query.where:
            return super()._measured
        counted = rows[: self.filtered_cap + 1].count()
        return counted, "exact" if counted <= self.filtered_cap else "more_than"

    @property
    def count_label(self) -> str:
        _, kind = self._measured
        return f"more than {self.filtered_cap:,}" if kind == "more_than" else super().count_label

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, self.max_pages)


class JobChangeList(ChangeList):
    result_list: Any  # the page's rows, set by ChangeList.get_results
    walks = False  # set per request: False for an id search or an error search's few rows

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        rows = super().get_queryset(request, exclude_parameters)
        chosen = {
            spec.column: value
            for spec in self.filter_specs
            if isinstance(spec, ColumnFilter) and (value := spec.chosen()) is not None
        }
        searched = column_search(self.query)
        self.walks = searched is not None or not self.query.strip()
        if searched is not None:
            column, value = searched
            if chosen.setdefault(column, value) != value:
                return rows.none()  # a filter and the search ask for two values of one column
        elif (start := error_start(self.query)) is not None:
            ids = few_errors(rows, start)  # few: gathered and sorted; many: walked
            self.walks = ids is None
            # gathered past the count's cap, with no filter to narrow them: not counted again
            setattr(request, ERRORS_PAST_CAP, ids is None and not chosen)
            rows = errors_starting(rows, start) if ids is None else rows.filter(pk__in=ids)
            return rows.filter(*(index_walks.tested(c, v) for c, v in chosen.items()))
        elif not self.walks:  # id, session or objective (OR-ed): their own indexes
            return rows.filter(*(index_walks.tested(c, v) for c, v in chosen.items()))
        return index_walks.narrowed(rows, chosen)

    def get_results(self, request: HttpRequest) -> None:
        # the count and the page each on one index walk; a search's few rows gathered
        # from its indexes (a BitmapOr of id, session and objective), then sorted
        with index_walks.walking(index_walks.WALK if self.walks else index_walks.GATHER):
            self._get_results(request)

    def _get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Keys of the page's folds: the last error is cut in the database, since a
        # handler's error can be 8,000 characters and a page shows a hundred of them.
        rows = self.result_list
        known = has_error(connections[rows.db].vendor, "last_error_text")
        annotated = rows.annotate(
            max_attempts=KT("state__maxAttempts"),
            run_at=KT("state__runAt"),  # G-3: a delayed job shows when it is due
            retry_at=KT("state__retryAt"),  # a retry policy's backoff: when it retries
            retried_after=KT("state__retriedAfterAttempt"),  # absent: never retried
            last_error_text=KT("state__lastError"),
            task_path=KT("state__payload__task"),  # read for django.task rows only
            last_error=Case(When(known, then=Substr("last_error_text", 1, ERROR_TOOLTIP_CHARS))),
        )
        self.result_list = list(annotated)  # read here, inside the walk


def clipped(value: str | None, css: str = "rcpt-clip") -> str:
    """A value cut to its column's width, the whole of it in the tooltip; a dash for none."""
    return NONE_HTML if value is None else titled(value, value, css=css)


def kind_cell(kind: str | None, task_path: str | None) -> str:
    """A job's kind; for a task job (every one is kind `django.task`) the task's path, cut
    from the left so its function name stays in sight, the kind and path in the tooltip."""
    path = task_payload.shown_path(kind, {"task": task_path})
    if path is None:
        return clipped(kind, "rcpt-clip rcpt-kind")
    return titled(path, f"{kind}: {path}", css="rcpt-clip rcpt-kind rcpt-task-path")


def error_cell(error: str | None) -> str:
    """The first line of a job's last error; more of it in the tooltip."""
    if not error:
        return NONE_HTML
    first = error.strip().splitlines()[0] if error.strip() else error
    return titled(first, error, css="rcpt-error")


def ago_text(ms: int) -> str:
    """A short age for a narrow column: 12 s, 3 min, 5 h, 2 d."""
    seconds = max(0, ms) // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 48 * 3600:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def ago_cell(at_ms: int, *, now_ms: int) -> str:
    """An age like "3 min ago", with the UTC time in the tooltip."""
    return titled(f"{ago_text(now_ms - at_ms)} ago", utc(at_ms), css="rcpt-ago")


def scheduled_note(obj: Job, *, now_ms: int) -> str:
    """G-3: "due in 5 min" beside a queued delayed job whose time is still ahead, "retry
    in 2 min" beside one waiting for its retry policy's backoff, the UTC time in the
    tooltip; nothing otherwise."""
    retrying = obj.attempt > 0  # after a failed attempt: its retry policy's backoff
    raw = getattr(obj, "retry_at" if retrying else "run_at", None)  # JSON text, or a number
    if raw is None or raw == "" or obj.status != "queued":
        return ""
    due = int(raw)
    if due <= now_ms:
        return ""
    at, label = ("retrying at", "retry in") if retrying else ("scheduled for", "due in")
    return format_html(
        ' <span class="rcpt-scheduled" title="{} {}">{} {}</span>',
        at,
        utc(due),
        label,
        ago_text(due - now_ms),
    )


class JobList(OperatorAdmin):
    """The changelist and the dashboard of `JobAdmin`."""

    list_display = (
        "id_col",
        "status_col",
        "agent_col",
        "kind_col",
        "lane",
        "group_col",
        "attempts_col",
        "org_col",
        "created_col",
        "updated_col",
        "error_col",
    )
    list_display_links = ("id_col",)
    list_filter = (
        StatusFilter,
        LaneFilter,
        AgentFilter,
        KindFilter,
        RoutedGroupFilter,
        OrganizationFilter,
    )
    search_fields = ("id",)  # shows the box; get_search_results makes every term exact
    search_help_text = (
        "Exact match. One column: id:, session:, objective:, org: or agent: before the value; "
        "error: finds failed and retrying jobs whose last error starts with the text."
    )
    ordering = ("-created_at", "-id")
    sortable_by = ()  # any other order would sort the whole table
    show_facets = admin.ShowFacets.NEVER  # facet counts are one COUNT per choice
    list_per_page = 100
    list_max_show_all = 100
    dashboard_template = "admin/jobs/job/dashboard.html"

    # The chat product's lane and organization (from a payload's authContext): columns and
    # filters where Factory, built on them, is installed; a project's own tasks have none.
    product_columns = ("lane", "org_col")
    product_filters = (LaneFilter, OrganizationFilter)

    def get_list_display(self, request: HttpRequest) -> Any:
        if apps.is_installed("objectives"):
            return self.list_display
        return tuple(c for c in self.list_display if c not in self.product_columns)

    def get_list_filter(self, request: HttpRequest) -> Any:
        if apps.is_installed("objectives"):
            return self.list_filter
        return tuple(f for f in self.list_filter if f not in self.product_filters)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # The fold can carry a 1 MiB payload; a page needs only a few keys of it (maxAttempts,
        # a task's path), which JobChangeList adds to the page's query (not to the
        # paginator's capped count).
        return super().get_queryset(request).defer("state")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_paginator(self, request: HttpRequest, *args: Any, **kwargs: Any) -> JobPaginator:
        paginator = JobPaginator(*args, **kwargs)
        paginator.past_cap = getattr(request, ERRORS_PAST_CAP, False)
        return paginator

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        condition = bare_search(search_term)
        return (queryset if condition is None else queryset.filter(condition)), False

    @admin.display(description="id")
    def id_col(self, obj: Job) -> str:
        return clipped(obj.id, "rcpt-id")

    @admin.display(description="status")
    def status_col(self, obj: Job) -> str:
        return format_html(
            "{}{}", status_badge(obj.status), scheduled_note(obj, now_ms=wall_clock_ms())
        )

    @admin.display(description="agent")
    def agent_col(self, obj: Job) -> str:
        return clipped(obj.agent_id, "rcpt-clip rcpt-agent")

    @admin.display(description="kind")
    def kind_col(self, obj: Job) -> str:
        return kind_cell(obj.kind, getattr(obj, "task_path", None))

    @admin.display(description="group")
    def group_col(self, obj: Job) -> str:
        return group_cell(
            obj.worker_group,
            contract_group(obj.kind),
            # a group other than its agent's and kind's is the enqueue's `queue`: asked for
            by_design=routing_by_design(obj.agent_id, obj.kind)
            or obj.worker_group != routed_group(obj.agent_id, obj.kind),
        )

    @admin.display(description="tries")
    def attempts_col(self, obj: Job) -> str:
        budget = getattr(obj, "max_attempts", None)
        if not budget:
            return f"{obj.attempt}/?"
        # a retried job's attempts keep counting: its last is the retry's attempt + budget
        last = int(budget) + int(getattr(obj, "retried_after", None) or 0)
        return f"{obj.attempt}/{last}"

    @admin.display(description="org")
    def org_col(self, obj: Job) -> str:
        return clipped(obj.organization_id, "rcpt-clip rcpt-org")

    @admin.display(description="age")
    def created_col(self, obj: Job) -> str:
        return ago_cell(obj.created_at, now_ms=wall_clock_ms())

    @admin.display(description="updated")
    def updated_col(self, obj: Job) -> str:
        return ago_cell(obj.updated_at, now_ms=wall_clock_ms())

    @admin.display(description="last error")
    def error_col(self, obj: Job) -> str:
        return error_cell(getattr(obj, "last_error", None))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {
            "title": "Jobs",
            "dashboard_url": reverse("admin:jobs_job_dashboard"),
            # the app menu would take a quarter of a laptop screen from the table
            "is_nav_sidebar_enabled": False,
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        own = [
            path("dashboard/", wrap(self.dashboard_view), name="jobs_job_dashboard"),
            path("dashboard.json", wrap(self.dashboard_json_view), name="jobs_job_dashboard_json"),
        ]
        return own + super().get_urls()

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        require(self.has_view_permission(request))
        data = dashboard.snapshot()
        context = {
            "title": "Jobs dashboard",
            "data": data,
            "tables": [render_table(table, data) for table in DASHBOARD_TABLES],
            "chart": render_chart(data),
            "is_nav_sidebar_enabled": False,  # the panels need the whole width of a laptop
            "json_url": reverse("admin:jobs_job_dashboard_json"),
            "changelist_url": reverse("admin:jobs_job_changelist"),
            "statuses": STATUSES,
            "utc_now": utc(data["now"]),
        }
        return self.render_page(request, self.dashboard_template, context)

    def dashboard_json_view(self, request: HttpRequest) -> JsonResponse:
        require(self.has_view_permission(request))
        return JsonResponse(dashboard.shared_snapshot())
