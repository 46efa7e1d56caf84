"""Operator admin for Factory (U-5, U-7, W-3): the objectives board, the objective page
(task DAG picture, tasks and their jobs, checkpoints, integration, audit, ledger) and its
actions (react, note, cancel, archive, promote), plus read-only ledger tables.

Actions are POSTs (CSRF on) that need `objectives.control_objective` and go through
`objectives.services` with `by = <admin username>`; nothing here writes a row itself.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

from objectives import dag_svg, ledger, presenters, selectors, services
from objectives.core.board import SECTIONS, with_queued
from objectives.core.vocabulary import objective_stream
from objectives.errors import ObjectiveNotFound, ObjectivesError
from objectives.models import Activity, ActivityAttempt, ObjectiveSummary, Signal, Workflow
from receipts.admin import utc

ACTIONS = ("react", "note", "cancel", "archive", "promote")


def job_admin_url(job_id: str) -> str:
    try:
        return reverse("admin:jobs_job_change", args=(quote(job_id),))
    except NoReverseMatch:  # the jobs admin is not installed: the same path by hand
        return f"/admin/jobs/job/{quote(job_id)}/change/"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def can_control(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("objectives.control_objective"))


class _ReadOnly(admin.ModelAdmin):
    actions = None
    show_full_result_count = False

    class Media:
        css = {"all": ("receipt/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ObjectiveSummary)
class ObjectiveAdmin(_ReadOnly):
    board_template = "admin/objectives/board.html"
    page_template = "admin/objectives/objective_page.html"

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The board: one table per section (Needs Attention, Active, Queued, ...)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        board = selectors.board(limit=100)
        queued = presenters.queued_by_objective(board)
        sections = [{"key": key, "title": title, "rows": [
            {"row": row, "url": reverse("admin:objectives_objectivesummary_change",
                                        args=(quote(row.id),)),
             "updated": utc(row.updated_at), "blocked": (row.state or {}).get("blockedReason"),
             "task_counts": with_queued(row.task_counts or {}, queued.get(row.id, 0))}
            for row in board[key]]} for key, title in SECTIONS]
        context = {**self.admin_site.each_context(request), "title": "Objectives",
                   "opts": self.opts, "sections": sections, **(extra_context or {})}
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.board_template, context)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        objective_id = unquote(object_id)
        try:
            state = selectors.visible(objective_id)
        except ObjectiveNotFound:
            raise Http404(f"objective {objective_id} not found") from None
        if request.method == "POST":
            return self._act(request, objective_id)
        jobs = selectors.objective_jobs(objective_id, limit=500)
        by_id = {job.job_id: job for job in jobs}
        depths = presenters.task_depths(state)
        shown = presenters.shown_statuses(state, selectors.open_run_statuses(state))
        tasks = [{"task": task, "depth": depths.get(task.id, 0), "shown": shown[task.id],
                  "runs": [{"run": run, "job": by_id.get(run.job_id),
                            "url": job_admin_url(run.job_id),
                            "monitor_url": job_admin_url(run.monitor_job_id)
                            if run.monitor_job_id else None} for run in task.runs]}
                 for task in state.tasks]
        context = {
            **self.admin_site.each_context(request), "title": state.title, "opts": self.opts,
            "state": state, "summary": presenters.live_status(state),
            "dag": dag_svg.render(state, job_admin_url, shown), "legend": dag_svg.legend(),
            "tasks": tasks, "jobs": [{"job": job, "url": job_admin_url(job.job_id),
                                      "updated": utc(job.updated_at)} for job in jobs],
            "audit_json": _pretty(state.audit.summary) if state.audit.summary else None,
            "integration_json": _pretty({"results": state.integration.results,
                                         "failure": state.integration.failure,
                                         "publish": state.integration.publish_output}),
            "ledger": ledger.rows_for_objective(objective_id),
            "stream_url": reverse("admin:receipts_stream_change",
                                  args=(quote(objective_stream(objective_id)),)),
            "created": utc(state.created_at), "updated": utc(state.updated_at),
            "can_control": can_control(request), "actions": ACTIONS,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.page_template, context)

    def _act(self, request: HttpRequest, objective_id: str) -> HttpResponse:
        if not can_control(request):
            raise PermissionDenied
        action, by = request.POST.get("action"), request.user.get_username()
        text = (request.POST.get("text") or "").strip()
        try:
            if action == "note":
                services.note(objective_id, text, by=by)
            elif action == "react":
                services.react(objective_id, by=by, message=text or None)
            elif action == "cancel":
                services.cancel(objective_id, by=by)
            elif action == "archive":
                services.archive(objective_id, by=by)
            elif action == "promote":
                services.promote(objective_id, by=by)
            else:
                messages.error(request, f"unknown action {action!r}")
                return HttpResponseRedirect(request.path)
        except ObjectivesError as error:
            messages.error(request, str(error))
        else:
            messages.success(request, f"{action}: recorded on {objective_id} by {by}")
        return HttpResponseRedirect(request.path)


@admin.register(Workflow)
class WorkflowAdmin(_ReadOnly):
    list_display = ("key", "name", "status", "revision", "updated_at")
    list_filter = ("status", "name")
    search_fields = ("=key", "=objective_id")


@admin.register(Activity)
class ActivityAdmin(_ReadOnly):
    list_display = ("key", "status", "attempts", "active_owner", "last_heartbeat",
                    "checkpoint_revision")
    list_filter = ("status",)
    search_fields = ("=key", "=job_id", "=objective_id")


@admin.register(ActivityAttempt)
class ActivityAttemptAdmin(_ReadOnly):
    list_display = ("activity_key", "attempt", "status", "owner", "started_at", "ended_at")
    search_fields = ("=activity_key",)


@admin.register(Signal)
class SignalAdmin(_ReadOnly):
    list_display = ("workflow_key", "name", "job_id", "created_at")
    search_fields = ("=workflow_key", "=job_id")
