"""The Schedules page: every schedule with its trigger, next run, last run and the
outcome of its last run's job, and the operator's pause, resume and run-now over the
selected rows. Each action goes through `jobs.schedules` with `by = <admin username>`,
which records it on the schedule's stream; nothing here writes. A schedule's history
is its stream, which its name links to."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from jobs import schedules
from jobs.core.schedules import STREAM_PREFIX
from jobs.dashboard_tables import status_badge
from jobs.errors import JobsError
from jobs.models import Job, Schedule
from observability.logs import log_event
from receipts.admin_kit import NONE_HTML, OwnChangePage, stream_url, titled, utc

logger = logging.getLogger("jobs.admin")


@admin.register(Schedule)
class ScheduleAdmin(OwnChangePage):
    """Viewing needs `jobs.view_schedule`, acting `jobs.change_schedule`. Schedules are
    declared in settings or code: none is added, edited or deleted here."""

    list_display = (
        "schedule_name",
        "trigger",
        "what",
        "status_cell",
        "next_run",
        "last_run",
        "last_outcome",
    )
    list_display_links = None
    search_fields = ("=name",)
    ordering = ("name",)
    actions = ("pause_selected", "resume_selected", "run_now_selected")

    class Media:
        css = {"all": ("receipt/admin.css", "receipt/jobs.css")}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # the last run's job status: one lookup by primary key per row of the page
        outcome = Job.objects.filter(pk=OuterRef("last_job_id")).values("status")[:1]
        return super().get_queryset(request).annotate(last_job_status=Subquery(outcome))

    def object_page(
        self, request: HttpRequest, name: str, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        """A schedule's page is its stream: every declaration, tick and action, with `by`."""
        return HttpResponseRedirect(stream_url(STREAM_PREFIX + name))

    # ---- columns ---------------------------------------------------------------------------

    @admin.display(description="schedule", ordering="name")
    def schedule_name(self, row: Schedule) -> str:
        return format_html('<a href="{}">{}</a>', stream_url(STREAM_PREFIX + row.name), row.name)

    @admin.display(description="kind")
    def what(self, row: Schedule) -> str:
        return titled(row.kind or "—", f"agent {row.agent_id}")

    @admin.display(description="status", ordering="status")
    def status_cell(self, row: Schedule) -> str:
        paused_by = row.state.get("pausedBy")
        if row.status == "paused" and paused_by:
            title = f"paused by {paused_by} at {utc(row.state.get('pausedAt'))}"
            return titled(f"paused by {paused_by}", title)
        return format_html("{}", row.status)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, row: Schedule) -> str:
        return _when(row.next_run_at) if row.status == "active" else NONE_HTML

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, row: Schedule) -> str:
        return _when(row.last_run_at)

    @admin.display(description="last outcome")
    def last_outcome(self, row: Schedule) -> str:
        error = row.state.get("lastError")
        if error:
            return titled("enqueue refused", error, css="rcpt-mismatch")
        if not row.last_job_id:
            return NONE_HTML
        status = getattr(row, "last_job_status", None)
        if status is None:  # removed by retention since
            return titled("gone", f"job {row.last_job_id} was removed by retention")
        url = reverse("admin:jobs_job_change", args=(quote(row.last_job_id),))
        return format_html(
            '<a href="{}" title="{}">{}</a>', url, row.last_job_id, status_badge(status)
        )

    # ---- actions ---------------------------------------------------------------------------

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Schedule],
        verb: str,
        act: Callable[[str, str], str | None],
    ) -> None:
        """Run `act(name, by)` on each selected schedule; one message for the lot."""
        by = request.user.get_username()
        done: list[str] = []
        refused: list[str] = []
        for name in queryset.order_by("name").values_list("name", flat=True)[:500]:
            try:
                extra = act(name, by)
            except JobsError as error:
                refused.append(f"{name} ({error})")
                continue
            done.append(f"{name} ({extra})" if extra else name)
        log_event(
            logger, f"admin.schedules_{verb.replace(' ', '_')}", f"{by}: {verb} {done}", by=by
        )
        if done:
            self.message_user(request, f"{verb.capitalize()}: {', '.join(done)}.", messages.SUCCESS)
        if refused:
            self.message_user(request, f"Refused: {'; '.join(refused)}.", messages.ERROR)

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(
            request, queryset, "paused", lambda name, by: _none(schedules.pause(name, by=by))
        )

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        def resume(name: str, by: str) -> str:
            state = schedules.resume(name, by=by)
            return f"next run {utc(state.next_run_at)}"

        self._each(request, queryset, "resumed", resume)

    @admin.action(description="Run selected schedules now", permissions=["change"])
    def run_now_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(
            request, queryset, "run now", lambda name, by: schedules.run_now(name, by=by).job.job_id
        )


def _none(_: Any) -> None:
    return None


def _when(ms: int | None) -> str:
    """To the second (ticks are whole seconds); the full time and ms value in the tooltip."""
    if ms is None:
        return NONE_HTML
    return titled(utc(ms)[:19] + " UTC", f"{utc(ms)} ({ms})")
