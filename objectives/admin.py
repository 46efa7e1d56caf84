"""Operator admin for Factory (U-5, U-7, W-3): the objectives board, the objective page
(task DAG picture, tasks and their jobs, checkpoints, integration, audit, ledger) and its
actions (react, note, cancel, archive, promote, and a plan for an objective blocked for
lack of one), plus read-only ledger tables.

Actions are POSTs (CSRF on) that need `objectives.control_objective` and go through
`objectives.services` with `by = <admin username>`; nothing here writes a row itself.
The page offers only the actions that can apply to the objective as it stands
(`available_actions`); a cancel is confirmed first (a confirm() in the browser, the
confirmation page without JavaScript).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import NoReverseMatch, reverse

from access.principals import session_scopes
from jobs.core.diagnosis import human_ms
from jobs.core.shell_commands import COMMANDS_SCOPE, command_paths
from objectives import dag_svg, ledger, presenters, selectors, services
from objectives.core.board import SECTIONS, with_queued
from objectives.core.state import ObjectiveState
from objectives.core.vocabulary import objective_stream
from objectives.errors import ObjectiveNotFound, ObjectivesError
from objectives.models import Activity, ActivityAttempt, ObjectiveSummary, Signal, Workflow
from receipts.admin_kit import (
    OwnChangePage,
    ReadOnlyAdmin,
    parse_json_text,
    pretty_json,
    require,
    stream_url,
    utc,
)

CONFIRMED = "yes"  # the `confirmed` field of a cancel that the operator confirmed
PLAN_EXAMPLE = '[{"id": "build", "title": "Build", "command": "make"}]'


def job_admin_url(job_id: str) -> str:
    try:
        return reverse("admin:jobs_job_change", args=(quote(job_id),))
    except NoReverseMatch:  # the jobs admin is not installed: the same path by hand
        return f"/admin/jobs/job/{quote(job_id)}/change/"


def can_control(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("objectives.control_objective"))


def waits_for_operator_plan(state: ObjectiveState) -> bool:
    """Blocked because no executable plan was found: an operator may supply one."""
    return state.is_blocked and state.blocked_kind == "plan" and not state.tasks


def available_actions(state: ObjectiveState) -> frozenset[str]:
    """The actions that can apply now: a finished objective can only be noted or archived,
    an investigation is never promoted, and Promote waits for the promotion gate."""
    actions = {"note"}
    if not state.archived:
        actions.add("archive")
    if not state.is_terminal:
        actions |= {"react", "cancel"}
    if state.awaiting_promotion and state.mode != "investigation":
        actions.add("promote")
    if waits_for_operator_plan(state):
        actions.add("plan")
    return frozenset(actions)


def _commands_refused(request: HttpRequest, tasks: Any) -> str | None:
    """A plan whose tasks carry commands runs them on the codex hosts: like the API, the
    admin asks for the commands scope (a superuser's) beyond controlling objectives."""
    carried = command_paths({"tasks": tasks})
    if not carried or COMMANDS_SCOPE in session_scopes(request.user):
        return None
    return (
        f"tasks with commands ({', '.join(carried[:3])}) need the {COMMANDS_SCOPE} scope, "
        "which your account does not have; give prompts instead, or ask a superuser"
    )


def _ms(value: Any) -> str:
    return human_ms(value) if isinstance(value, int | float) else "—"


def integration_view(state: ObjectiveState) -> dict[str, Any]:
    """Integration as tables: each check with its latest result, the failure, publication."""
    integration = state.integration
    results = integration.results if isinstance(integration.results, list) else []
    by_name: dict[Any, dict[str, Any]] = {r.get("name"): r for r in results if isinstance(r, dict)}
    names = [c.name for c in state.checks] + [
        n for n in by_name if n not in {c.name for c in state.checks}
    ]
    commands = {c.name: c.command for c in state.checks}
    checks = []
    for name in names:
        result = by_name.get(name)
        checks.append(
            {
                "name": name,
                "command": commands.get(name),
                "ran": result is not None,
                "exit_code": result.get("exitCode") if result else None,
                "ok": result is not None
                and result.get("exitCode") == 0
                and not result.get("timedOut"),
                "timed_out": bool(result and result.get("timedOut")),
                "duration": _ms(result.get("durationMs")) if result else "—",
                "output": (result or {}).get("outputTail") or None,
            }
        )
    failure = integration.failure if isinstance(integration.failure, dict) else None
    publish = integration.publish_output if isinstance(integration.publish_output, dict) else None
    jobs = [
        (label, job_id, job_admin_url(job_id))
        for label, job_id in (
            ("validation job", integration.validate_job_id),
            ("publish job", integration.publish_job_id),
        )
        if job_id
    ]
    return {
        "checks": checks,
        "failure": failure,
        "publish": publish,
        "jobs": jobs,
        "promoted": utc(integration.promoted_at) if integration.promoted_at else None,
    }


def ledger_view(objective_id: str) -> dict[str, Any]:
    """The ledger rows with a link from each activity to its job."""
    rows = ledger.rows_for_objective(objective_id)
    rows["activities"] = [
        {**a, "url": job_admin_url(a["job_id"]) if a.get("job_id") else None}
        for a in rows["activities"]
    ]
    return rows


def audit_view(state: ObjectiveState) -> dict[str, Any] | None:
    """The audit summary as rows of facts and a per-task table (None before it is recorded)."""
    summary = state.audit.summary
    if not isinstance(summary, dict):
        return None
    durations = summary.get("durations") or {}
    failures, retries = summary.get("failures") or {}, summary.get("retries") or {}
    jobs = summary.get("jobs") or {}
    verified = summary.get("verified") or {}

    def counts(value: Any) -> str:
        if not isinstance(value, dict) or not value:
            return "—"
        return ", ".join(f"{key} {count}" for key, count in sorted(value.items()))

    facts = [
        (
            "Status",
            f"{summary.get('status', '—')}"
            + (f" ({summary['terminalReason']})" if summary.get("terminalReason") else ""),
        ),
        ("Duration", _ms(durations.get("objectiveMs"))),
        ("Jobs", f"{jobs.get('count', 0)} · {counts(jobs.get('byStatus'))}"),
        ("Jobs by kind", counts(jobs.get("byKind"))),
        ("Attempts", str(summary.get("attempts", "—"))),
        (
            "Failures",
            f"{failures.get('jobs', 0)} failed job(s), "
            f"{failures.get('taskPasses', 0)} failed task pass(es)",
        ),
        (
            "Retries",
            f"{retries.get('jobs', 0)} retried job(s), "
            f"{retries.get('taskPasses', 0)} repeated task pass(es)",
        ),
    ]
    broken = [
        {
            "job_id": b.get("jobId"),
            "url": job_admin_url(str(b.get("jobId"))),
            "reason": b.get("reason"),
            "index": b.get("index"),
        }
        for b in verified.get("brokenJobs") or []
        if isinstance(b, dict)
    ]
    tasks = [
        {
            "id": task_id,
            "status": t.get("status"),
            "passes": t.get("passes"),
            "failed": t.get("failedPasses"),
            "duration": _ms(t.get("durationMs")),
        }
        for task_id, t in (durations.get("tasks") or {}).items()
        if isinstance(t, dict)
    ]
    return {
        "facts": facts,
        "verified_ok": verified.get("ok"),
        "jobs_checked": verified.get("jobsChecked"),
        "broken": broken,
        "tasks": tasks,
        "job_url": job_admin_url(state.audit.job_id) if state.audit.job_id else None,
    }


@admin.register(ObjectiveSummary)
class ObjectiveAdmin(OwnChangePage, ReadOnlyAdmin):
    board_template = "admin/objectives/board.html"
    page_template = "admin/objectives/objective_page.html"
    cancel_template = "admin/objectives/cancel_confirm.html"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The board: one table per section (Needs Attention, Active, Queued, ...)."""
        require(self.has_view_permission(request))
        board = selectors.board(limit=100)
        queued = presenters.queued_by_objective(board)
        sections = [
            {
                "key": key,
                "title": title,
                "rows": [
                    {
                        "row": row,
                        "url": reverse(
                            "admin:objectives_objectivesummary_change", args=(quote(row.id),)
                        ),
                        "updated": utc(row.updated_at),
                        "blocked": (row.state or {}).get("blockedReason"),
                        "task_counts": with_queued(row.task_counts or {}, queued.get(row.id, 0)),
                    }
                    for row in board[key]
                ],
            }
            for key, title in SECTIONS
        ]
        context = {"title": "Objectives", "sections": sections}
        return self.render_page(request, self.board_template, context, extra_context)

    def object_page(
        self, request: HttpRequest, objective_id: str, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        try:
            state = selectors.visible(objective_id)
        except ObjectiveNotFound:
            raise Http404(f"objective {objective_id} not found") from None
        panels: dict[str, Any] = {}
        if request.method == "POST":
            answer = self._act(request, state, panels)
            if answer is not None:
                return answer
            state = selectors.visible(objective_id)
        return self._render(request, state, panels, extra_context)

    def _render(
        self,
        request: HttpRequest,
        state: ObjectiveState,
        panels: dict[str, Any],
        extra_context: dict[str, Any] | None,
    ) -> HttpResponse:
        objective_id = state.objective_id
        jobs = selectors.objective_jobs(objective_id, limit=500)
        by_id = {job.job_id: job for job in jobs}
        depths = presenters.task_depths(state)
        shown = presenters.shown_statuses(state, selectors.open_run_statuses(state))
        tasks = [
            {
                "task": task,
                "depth": depths.get(task.id, 0),
                "shown": shown[task.id],
                "runs": [
                    {
                        "run": run,
                        "job": by_id.get(run.job_id),
                        "url": job_admin_url(run.job_id),
                        "monitor_url": job_admin_url(run.monitor_job_id)
                        if run.monitor_job_id
                        else None,
                    }
                    for run in task.runs
                ],
            }
            for task in state.tasks
        ]
        raw = {
            "results": state.integration.results,
            "failure": state.integration.failure,
            "publish": state.integration.publish_output,
        }
        context = {
            "title": state.title,
            "state": state,
            "summary": presenters.live_status(state),
            "dag": dag_svg.render(state, job_admin_url, shown),
            "legend": dag_svg.legend(),
            "tasks": tasks,
            "jobs": [
                {"job": job, "url": job_admin_url(job.job_id), "updated": utc(job.updated_at)}
                for job in jobs
            ],
            "audit": audit_view(state),
            "audit_json": pretty_json(state.audit.summary) if state.audit.summary else None,
            "integration": integration_view(state),
            "integration_json": pretty_json(raw) if any(raw.values()) else None,
            "ledger": ledger_view(objective_id),
            "stream_url": stream_url(objective_stream(objective_id)),
            "created": utc(state.created_at),
            "updated": utc(state.updated_at),
            "can_control": can_control(request),
            "available": available_actions(state),
            "confirmed": CONFIRMED,
            "plan_example": PLAN_EXAMPLE,
            "plan_error": panels.get("plan_error"),
            "plan_text": panels.get("plan_text", ""),
        }
        return self.render_page(request, self.page_template, context, extra_context)

    def _confirm_cancel(self, request: HttpRequest, state: ObjectiveState) -> HttpResponse:
        """The no-JavaScript confirmation step of a cancel."""
        context = {
            "title": "Cancel objective?",
            "state": state,
            "confirmed": CONFIRMED,
            "page_url": request.path,
        }
        return self.render_page(request, self.cancel_template, context)

    def _act(
        self, request: HttpRequest, state: ObjectiveState, panels: dict[str, Any]
    ) -> HttpResponse | None:
        """Run one posted action: a redirect after a write, None to show the page with an
        inline error (the plan form), or the cancel confirmation page."""
        require(can_control(request))
        objective_id = state.objective_id
        action, by = request.POST.get("action"), request.user.get_username()
        text = (request.POST.get("text") or "").strip()
        if action == "cancel" and request.POST.get("confirmed") != CONFIRMED:
            return self._confirm_cancel(request, state)
        if action == "plan":
            raw = request.POST.get("tasks", "")
            # the plan itself is checked by `services.react` (the API's validation)
            tasks, problem = parse_json_text(
                raw,
                missing=f"Enter the tasks as a JSON list, e.g. {PLAN_EXAMPLE}.",
                invalid="The tasks are not valid JSON",
            )
            if problem is None:
                problem = _commands_refused(request, tasks)
            if problem is None:
                try:
                    services.react(
                        objective_id,
                        by=by,
                        tasks=tasks,
                        message=text or "plan supplied from the admin",
                    )
                except ObjectivesError as error:
                    problem = str(error)
            if problem is not None:
                problem = problem[:1].upper() + problem[1:].rstrip(".") + "."
                panels.update(plan_error=problem, plan_text=raw)
                return None
            messages.success(
                request,
                f"plan: {len(tasks)} task(s) given to {objective_id} by "
                f"{by}; the objective plans them next",
            )
            return HttpResponseRedirect(request.path)
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
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = ("key", "name", "status", "revision", "updated_at")
    list_filter = ("status", "name")
    search_fields = ("=key", "=objective_id")


@admin.register(Activity)
class ActivityAdmin(ReadOnlyAdmin):
    list_display = (
        "key",
        "status",
        "attempts",
        "active_owner",
        "last_heartbeat",
        "checkpoint_revision",
    )
    list_filter = ("status",)
    search_fields = ("=key", "=job_id", "=objective_id")


@admin.register(ActivityAttempt)
class ActivityAttemptAdmin(ReadOnlyAdmin):
    list_display = ("activity_key", "attempt", "status", "owner", "started_at", "ended_at")
    search_fields = ("=activity_key",)


@admin.register(Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("workflow_key", "name", "job_id", "created_at")
    search_fields = ("=workflow_key", "=job_id")
