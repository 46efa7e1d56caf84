"""Operator admin for jobs (U-1, U-2, U-3, U-6, U-7): the changelist, the job page, its
actions and the dashboard.

Reads come from the read model, the receipt store and the runtime selectors; every write
goes through the service that owns it: `queue` (abort, steer, follow-up: receipts with
`by = <admin username>`), `redrive` (manual redrive, which records itself on the job's
audit stream) and `store.replay` (rebuild); replay and verify are put on record by
`receipts.audit`. Nothing here writes a job row or a receipt itself. Other apps add to
the job page through `page_sections`.

The changelist stays on an index at a million jobs: filter choices from code (the agent
list adds a loose index scan of `job_agent_newest`, never a DISTINCT over the table),
exact-match search, newest-first on `job_newest`, and the streams browser's paginator,
which never counts a whole table.
"""

from __future__ import annotations

import json
import logging
from functools import cached_property
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Case, Q, QuerySet, When
from django.db.models.fields.json import KT
from django.db.models.functions import Substr
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from jobs import callback_records, dashboard, handlers, page_sections, queue, redrive, selectors
from jobs.core.contracts import (
    WORKER_GROUPS,
    all_kinds,
    contract_for,
    contract_group,
    routing_by_design,
)
from jobs.core.state import JobState
from jobs.core.vocabulary import LANES, STATUSES, job_stream
from jobs.dashboard_tables import DASHBOARD_TABLES, render_chart, render_table, status_badge
from jobs.diagnosis import diagnosis
from jobs.errors import JobNotFound, JobNotQueued, JobsError
from jobs.models import Job
from jobs.presenters import job_json
from jobs.runtime import promises
from observability.logs import log_event
from receipts import audit, store
from receipts.admin import (
    NONE_HTML,
    PAGE_SIZE,
    CheapCountPaginator,
    can_replay,
    can_verify,
    chain_marks,
    pretty_json,
    receipt_lines,
    replay_panel,
    utc,
)
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger(__name__)

ERROR_TOOLTIP_CHARS = 600  # of a job's last error, read for the changelist's tooltip
BULK_LIMIT = 500  # jobs one bulk action may touch; "select all" past it is refused
MAX_REASON = 2000
JOB_ACTIONS = ("abort", "steer", "follow_up", "redrive", "replay", "verify")
WRITE_ACTIONS = ("abort", "steer", "follow_up", "redrive")  # jobs.change_job (U-7)
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
    if by_design:
        return format_html(
            '{} <span class="rcpt-route-note" title="contract group {}; built-in agents '
            'route by agent id first, so this is expected">contract {}</span>',
            routed,
            contract,
            contract,
        )
    return format_html(
        '{} <span class="rcpt-mismatch" title="contract group {} differs from routed group {} '
        '(routing is by agent id first)">⚠ contract {}</span>',
        routed,
        contract,
        routed,
        contract,
    )


def parse_search(term: str) -> Q | None:
    """`org:acme` -> one exact column; a bare term -> id, session key or objective id."""
    term = term.strip()
    if not term:
        return None
    prefix, sep, value = term.partition(":")
    if sep and prefix.lower() in SEARCH_PREFIXES and value.strip():
        return Q(**{SEARCH_PREFIXES[prefix.lower()]: value.strip()})
    return Q(pk=term) | Q(session_key=term) | Q(objective_id=term)


# ---- filters: choices from the vocabulary, the contracts and the agent index ---------------


class FixedChoicesFilter(admin.SimpleListFilter):
    """One exact column against a list known in code: no query builds the choices."""

    column: str
    known: tuple[str, ...] = ()  # (`choices` is a ListFilter method)

    def values(self) -> tuple[str, ...]:
        return self.known

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in self.values()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


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
    title, parameter_name, column = "routed group", "group", "worker_group"
    known = tuple(WORKER_GROUPS)


class OrganizationFilter(admin.SimpleListFilter):
    """A text box: organization ids are open-ended, so there is no list to offer."""

    title, parameter_name = "organization", "org"
    template = "admin/jobs/job/input_filter.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return []

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = (self.value() or "").strip()
        return queryset.filter(organization_id=value) if value else queryset

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


# ---- the job page's panels -----------------------------------------------------------------


def _int_param(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw not in (None, "") else default
    except ValueError:
        return default


def state_at_panel(job_id: str, at: int, count: int) -> dict[str, Any]:
    """The job after its first `at` receipts (S-7), as the API's job JSON."""
    try:
        state: JobState | None = store.state_at(job_stream(job_id), at)
    except Exception as error:  # a reducer refusing a corrupt chain must not hide the page
        return {"at": at, "count": count, "error": f"{type(error).__name__}: {error}"}
    if state is None:
        return {"at": at, "count": count, "json": pretty_json(None), "status": None}
    return {"at": at, "count": count, "json": pretty_json(job_json(state)), "status": state.status}


def promise_rows(job_id: str, *, now_ms: int) -> list[dict[str, Any]]:
    rows = []
    for p in promises.for_job(job_id, now_ms=now_ms):
        rows.append(
            {
                "id": p.id,
                "function": p.function,
                "attempt": p.attempt,
                "group": p.target_group,
                "state": p.state,
                "worker": p.worker_id,
                "dispatch_key": p.dispatch_key,
                "created": utc(p.created_at),
                "settled": utc(p.settled_at),
                "timeout": utc(p.timeout_at),
                "result": None if p.result is None else pretty_json(p.result),
            }
        )
    return rows


def command_rows(job: JobState) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "command": c.command,
            "lane": c.lane,
            "by": c.by,
            "created": utc(c.created_at),
            "consumed": utc(c.consumed_at) if c.consumed_at else None,
            "payload": pretty_json(c.payload),
            "pending": c.pending,
        }
        for c in reversed(job.commands)
    ]


def progress_panel(job_id: str) -> dict[str, Any] | None:
    """The latest progress report; a task's stdout and stderr tails shown as text."""
    progress = selectors.last_progress(job_id)
    if progress is None:
        return None
    report = progress.report if isinstance(progress.report, dict) else {}
    stdout, stderr = report.get("stdoutTail"), report.get("stderrTail")
    return {
        "at": utc(progress.at),
        "attempt": progress.attempt,
        "worker": progress.worker_id,
        "stdout": stdout if isinstance(stdout, str) else None,
        "stderr": stderr if isinstance(stderr, str) else None,
        "json": pretty_json(progress.report),
    }


def operator_actions(stream: str) -> list[dict[str, Any]]:
    """Redrives, replays and verifications recorded on the job's audit stream, newest first."""
    return [
        {"by": r.body.get("by"), "at": utc(r.ts), "text": audit.describe(r.body)}
        for r in reversed(audit.history(stream))
    ]


def parse_payload(text: str) -> tuple[Any, str | None]:
    """The steer/follow-up textarea as JSON, or an error sentence (Q-3)."""
    if not text.strip():
        return None, 'Enter a JSON payload, e.g. {"message": "..."}.'
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return (
            None,
            f"The payload is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno}).",
        )


class JobPaginator(CheapCountPaginator):
    """At most `max_pages` pages: a deeper page is an OFFSET that walks (or, on PostgreSQL,
    sorts) every row before it. Older jobs are reached by filtering, not by paging."""

    max_pages = 100

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, self.max_pages)


class JobChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Two keys of the page's folds: the last error is cut in the database, since a
        # handler's error can be 8,000 characters and a page shows a hundred of them.
        # (SQLite's KT reads a JSON null as the text 'null': the When keeps it NULL.)
        self.result_list = self.result_list.annotate(
            max_attempts=KT("state__maxAttempts"),
            last_error=Case(
                When(
                    ~Q(state__lastError=None),
                    then=Substr(KT("state__lastError"), 1, ERROR_TOOLTIP_CHARS),
                )
            ),
        )


def error_cell(error: str | None) -> str:
    """The first line of a job's last error; more of it in the tooltip."""
    if not error:
        return NONE_HTML
    first = error.strip().splitlines()[0] if error.strip() else error
    return format_html('<span class="rcpt-error" title="{}">{}</span>', error, first)


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
    return format_html(
        '<span class="rcpt-ago" title="{}">{} ago</span>', utc(at_ms), ago_text(now_ms - at_ms)
    )


# ---- the model admin -------------------------------------------------------------------------


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
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
        "Exact match. One column: id:, session:, objective:, org: or agent: before the value."
    )
    ordering = ("-created_at", "-id")
    sortable_by = ()  # any other order would sort the whole table
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts are one COUNT per choice
    paginator = JobPaginator
    list_per_page = 100
    list_max_show_all = 100
    actions = ("abort_selected", "redrive_selected")
    job_template = "admin/jobs/job/job_page.html"
    dashboard_template = "admin/jobs/job/dashboard.html"
    abort_confirmation_template = "admin/jobs/job/abort_selected.html"

    class Media:
        css = {"all": ("receipt/admin.css", "receipt/jobs.css")}

    # ---- permissions (U-7) -------------------------------------------------------------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return (
            request.user.is_active
            and request.user.is_staff
            and super().has_view_permission(request, obj)
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued through the API or the queue service

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # receipts are never deleted; a job row is their projection

    def can_act(self, request: HttpRequest) -> bool:
        """abort, steer, follow-up and redrive: `jobs.change_job`."""
        return (
            request.user.is_active and request.user.is_staff and self.has_change_permission(request)
        )

    # ---- changelist (U-1) ----------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # The fold can carry a 1 MiB payload; a page needs only maxAttempts from it, which
        # JobChangeList adds to the page's query (not to the paginator's capped count).
        return super().get_queryset(request).defer("state")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        condition = parse_search(search_term)
        return (queryset if condition is None else queryset.filter(condition)), False

    @admin.display(description="id")
    def id_col(self, obj: Job) -> str:
        return format_html('<span class="rcpt-id" title="{}">{}</span>', obj.id, obj.id)

    @admin.display(description="status")
    def status_col(self, obj: Job) -> str:
        return status_badge(obj.status)

    @admin.display(description="agent")
    def agent_col(self, obj: Job) -> str:
        agent = obj.agent_id
        return format_html('<span class="rcpt-clip" title="{}">{}</span>', agent, agent)

    @admin.display(description="kind")
    def kind_col(self, obj: Job) -> str:
        if obj.kind is None:
            return NONE_HTML
        return format_html('<span class="rcpt-clip" title="{}">{}</span>', obj.kind, obj.kind)

    @admin.display(description="group")
    def group_col(self, obj: Job) -> str:
        return group_cell(
            obj.worker_group,
            contract_group(obj.kind),
            by_design=routing_by_design(obj.agent_id, obj.kind),
        )

    @admin.display(description="tries")
    def attempts_col(self, obj: Job) -> str:
        return f"{obj.attempt}/{getattr(obj, 'max_attempts', None) or '?'}"

    @admin.display(description="org")
    def org_col(self, obj: Job) -> str:
        if obj.organization_id is None:
            return NONE_HTML
        org = obj.organization_id
        return format_html('<span class="rcpt-clip rcpt-org" title="{}">{}</span>', org, org)

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

    # ---- bulk actions (U-3) ----------------------------------------------------------------------

    def _bulk_ids(self, request: HttpRequest, queryset: QuerySet[Job]) -> list[str] | None:
        ids = list(
            queryset.order_by("-created_at", "-id").values_list("id", flat=True)[: BULK_LIMIT + 1]
        )
        if len(ids) > BULK_LIMIT:
            self.message_user(
                request,
                f"More than {BULK_LIMIT} jobs selected; narrow the "
                f"filter and act on at most {BULK_LIMIT} at a time. "
                "Nothing was changed.",
                messages.ERROR,
            )
            return None
        return ids

    @admin.action(description="Abort selected jobs…", permissions=["change"])
    def abort_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        ids = self._bulk_ids(request, queryset)
        if ids is None:
            return None
        if request.POST.get("post") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Abort jobs",
                "opts": self.opts,
                "jobs": list(
                    queryset.filter(pk__in=ids)
                    .order_by("-created_at", "-id")
                    .values("id", "status", "agent_id", "kind")
                ),
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                "reason_limit": MAX_REASON,
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(request, self.abort_confirmation_template, context)
        reason = request.POST.get("reason", "").strip()[:MAX_REASON] or None
        by = request.user.get_username()
        canceled = commanded = 0
        skipped: list[str] = []
        for job_id in ids:
            try:
                result = queue.abort(job_id, reason=reason, by=by)
            except JobsError as error:
                skipped.append(f"{job_id} ({error})")
                continue
            if result.canceled:
                canceled += 1
            else:
                commanded += 1
        log_event(
            logger,
            "admin.jobs_aborted",
            f"{by} aborted {canceled + commanded} jobs",
            by=by,
            canceled=canceled,
            commanded=commanded,
            skipped=len(skipped),
        )
        self.message_user(
            request,
            f"Aborted: {canceled} queued job(s) canceled, abort command "
            f"sent to {commanded} leased/running job(s).",
            messages.SUCCESS,
        )
        if skipped:
            self.message_user(
                request, f"Skipped {len(skipped)}: " + "; ".join(skipped[:20]), messages.WARNING
            )
        return None

    @admin.action(description="Redrive selected queued jobs now", permissions=["change"])
    def redrive_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = self._bulk_ids(request, queryset)
        if ids is None:
            return
        by = request.user.get_username()
        started, skipped, failed = [], [], []
        for job_id in ids:
            try:
                redrive.redrive_now(job_id, by=by)
            except JobNotFound:
                skipped.append(f"{job_id} (missing)")
            except JobNotQueued as error:
                skipped.append(f"{job_id} ({error.job_status})")
            except JobsError as error:
                failed.append(f"{job_id} ({error})")
            else:
                started.append(job_id)
        log_event(
            logger,
            "admin.jobs_redriven",
            f"{by} redrove {len(started)} jobs",
            by=by,
            jobIds=started[:50],
            skipped=len(skipped),
            failed=len(failed),
        )
        self.message_user(
            request, f"Redrive started for {len(started)} queued job(s).", messages.SUCCESS
        )
        if skipped:
            self.message_user(
                request,
                f"Skipped {len(skipped)} job(s) that are not queued: " + "; ".join(skipped[:20]),
                messages.WARNING,
            )
        if failed:
            self.message_user(
                request, "Redrive failed for " + "; ".join(failed[:20]), messages.ERROR
            )

    # ---- URLs: the dashboard beside the changelist (U-6) ----------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        own = [
            path("dashboard/", wrap(self.dashboard_view), name="jobs_job_dashboard"),
            path("dashboard.json", wrap(self.dashboard_json_view), name="jobs_job_dashboard_json"),
        ]
        return own + super().get_urls()

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = dashboard.snapshot()
        context = {
            **self.admin_site.each_context(request),
            "title": "Jobs dashboard",
            "opts": self.opts,
            "data": data,
            "tables": [render_table(table, data) for table in DASHBOARD_TABLES],
            "chart": render_chart(data),
            "is_nav_sidebar_enabled": False,  # the panels need the whole width of a laptop
            "json_url": reverse("admin:jobs_job_dashboard_json"),
            "changelist_url": reverse("admin:jobs_job_changelist"),
            "statuses": STATUSES,
            "utc_now": utc(data["now"]),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.dashboard_template, context)

    def dashboard_json_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return JsonResponse(dashboard.shared_snapshot())

    # ---- the job page (U-2) and its actions (U-3) ---------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        job_id = unquote(object_id)
        if queue.get(job_id) is None:
            from jobs import pruned_page  # a job retention removed shows its tombstone

            answer = pruned_page.page(self, request, job_id) if request.method == "GET" else None
            if answer is not None:
                return answer
            raise Http404(f"job {job_id} not found")
        panels: dict[str, Any] = {}
        if request.method == "POST":
            answer = self._act(request, job_id, panels)
            if answer is not None:
                return answer
        return self._render(request, job_id, panels, extra_context)

    def _act(
        self, request: HttpRequest, job_id: str, panels: dict[str, Any]
    ) -> HttpResponse | None:
        """Run one posted action. A redirect after a write; panels for replay/verify/errors."""
        action = request.POST.get("action")
        if action not in JOB_ACTIONS:
            return HttpResponseBadRequest("unknown job action")
        by = request.user.get_username()
        stream = job_stream(job_id)
        if action in WRITE_ACTIONS and not self.can_act(request):
            raise PermissionDenied
        if action == "verify":
            if not can_verify(request):
                raise PermissionDenied
            panels["verification"] = store.verify(stream)
            audit.record_verify(stream, panels["verification"], by=by)
            log_event(
                logger,
                "admin.job_verified",
                f"{by} verified {stream}",
                stream=stream,
                by=by,
                ok=panels["verification"].ok,
            )
            return None
        if action == "replay":
            if not can_replay(request):
                raise PermissionDenied
            dry_run = request.POST.get("dry_run") == "1"
            panels["replay"] = replay_panel(stream, dry_run=dry_run)
            audit.record_replay(
                stream,
                by=by,
                dry_run=dry_run,
                drift=len(panels["replay"].get("drift", [])),
                refused=panels["replay"].get("refused"),
            )
            log_event(
                logger,
                "admin.job_replayed",
                f"{by} replayed {stream}",
                stream=stream,
                by=by,
                dry_run=dry_run,
                drift=len(panels["replay"].get("drift", [])),
                refused="refused" in panels["replay"],
            )
            return None
        try:
            if action == "abort":
                reason = request.POST.get("reason", "").strip()[:MAX_REASON] or None
                result = queue.abort(job_id, reason=reason, by=by)
                text = (
                    "Job canceled (it was queued)."
                    if result.canceled
                    else "Abort command sent; the worker stops at its next heartbeat."
                )
            elif action in ("steer", "follow_up"):
                raw = request.POST.get("payload", "")
                payload, problem = parse_payload(raw)
                if problem is not None:
                    panels["command_error"] = {"action": action, "message": problem, "text": raw}
                    return None
                result = queue.command(job_id, action, payload, by=by)
                text = f"{action.replace('_', '-')} command {result.command['id']} sent."
            else:  # redrive
                text = redrive.redrive_now(job_id, by=by).message
        except JobsError as error:
            panels["command_error"] = {
                "action": action,
                "message": str(error),
                "text": request.POST.get("payload", ""),
            }
            return None
        messages.success(request, text)
        return HttpResponseRedirect(request.get_full_path())

    def _render(
        self,
        request: HttpRequest,
        job_id: str,
        panels: dict[str, Any],
        extra_context: dict[str, Any] | None,
    ) -> HttpResponse:
        now = wall_clock_ms()
        job = queue.get(job_id)
        if job is None:  # a replay may have removed the row (no receipts)
            raise Http404(f"job {job_id} not found")
        stream = job_stream(job_id)
        info = store.stream_info(stream)
        count = info.count if info else 0
        wire = job_json(job)
        contract = contract_for(job.kind)
        diagnosed = diagnosis(job_id, now_ms=now)
        page_links, page_parts, page_errors = page_sections.collect(job)
        default_after = max(0, count - PAGE_SIZE)
        after = max(0, min(_int_param(request.GET.get("after"), default_after), count))
        page = store.read(stream, after=after, limit=PAGE_SIZE)
        marks, walked_from = chain_marks(stream, page, after=after)
        verification = panels.get("verification")
        last_shown = page[-1].stream_seq if page else after
        at_raw = request.GET.get("at")
        state_at = (
            state_at_panel(job_id, max(0, min(_int_param(at_raw, count), count)), count)
            if at_raw not in (None, "")
            else None
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Job {job_id}",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "job": job,
            "wire": wire,
            "fold_json": pretty_json(wire),
            "status_badge": status_badge(job.status),
            "contract": contract.to_wire() if contract else None,
            "route_by_design": routing_by_design(job.agent_id, job.kind),
            "diagnosis": diagnosed,
            "diagnosis_facts": pretty_json(diagnosed["facts"]),
            "stream": info,
            "stream_url": reverse("admin:receipts_stream_change", args=(quote(stream),)),
            "receipt_count": count,
            "created_utc": utc(job.created_at),
            "updated_utc": utc(job.updated_at),
            "lease_utc": utc(job.lease_until) if job.lease_until else None,
            "lines": receipt_lines(page, marks, verification),
            "walked_from": walked_from,
            "after": after,
            "first_shown": after + 1 if page else after,
            "last_shown": last_shown,
            "older_after": max(0, after - PAGE_SIZE) if after > 0 else None,
            "newer_after": last_shown if last_shown < count else None,
            "latest_after": default_after,
            "state_at": state_at,
            "promises": promise_rows(job_id, now_ms=now),
            "commands": command_rows(job),
            "pending_commands": len(job.pending_commands),
            "progress": progress_panel(job_id),
            "operator_actions": operator_actions(stream),
            "audit_stream_url": reverse(
                "admin:receipts_stream_change", args=(quote(audit.stream_for(stream)),)
            ),
            "page_links": page_links,
            "page_sections": page_parts,
            "page_errors": page_errors,
            "callbacks": dashboard.callbacks_block(),
            "callback_rows": callback_records.admin_rows(job_id),
            "verification": verification,
            "replay": panels.get("replay"),
            "command_error": panels.get("command_error"),
            "can_act": self.can_act(request),
            "can_verify": can_verify(request),
            "can_replay": can_replay(request),
            "events_url": reverse("job-events", args=(job_id,)),
            "changelist_url": reverse("admin:jobs_job_changelist"),
            "dashboard_url": reverse("admin:jobs_job_dashboard"),
            "none_html": NONE_HTML,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.job_template, context)
