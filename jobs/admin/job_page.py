"""The job page (U-2): the fold, contract and routing, diagnosis, the verified receipt
timeline with time travel, promises, commands, progress, callbacks, the operator actions on
record and what other apps add through `page_sections`. Its POSTs run in `actions`.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from jobs import callbacks, dashboard, page_sections, queue, selectors
from jobs.admin.actions import JobActions
from jobs.core.bodies import retry_refusal
from jobs.core.contracts import contract_for, routing_by_design
from jobs.core.diagnosis import retried_detail, retrying_detail
from jobs.core.state import JobState
from jobs.core.vocabulary import job_stream
from jobs.dashboard_tables import status_badge
from jobs.diagnosis import diagnosis
from jobs.presenters import job_json
from jobs.runtime import promises
from jobs.tasks import payload as task_payload
from receipts import audit, store
from receipts.admin import PAGE_SIZE, chain_page, position_param
from receipts.admin_kit import NONE_HTML, OwnChangePage, pretty_json, stream_url, utc
from receipts.clock import now_ms as wall_clock_ms


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
    return [
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
        for p in promises.for_job(job_id, now_ms=now_ms)
    ]


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


def task_row(job: JobState) -> dict[str, Any] | None:
    """A task job's task: its path and, when its enqueue named one, its queue (the
    payload's `queueName`, else the worker group the enqueue chose); None for other jobs."""
    path = task_payload.shown_path(job.kind, job.payload)
    if path is None:
        return None
    named = job.payload.get("queueName")
    return {"path": path, "queue": named if isinstance(named, str) and named else job.queue}


def product_rows(job: JobState) -> dict[str, bool]:
    """Which of the chat product's summary rows the job shows. Beside Factory (`objectives`
    installed), all of them. Without it there is no objective to show, and an
    organization only when the job's payload named one (a task has none).

    The lane is a label an enqueue picks (chat, collect, steer, follow_up): the dashboard
    and the metrics count by it, nothing routes or orders by it. A task's enqueue never
    picks one, so every task job reads `collect`, the default, which says nothing about
    it: its Lane row goes without Factory. A job enqueued through the API or the CLI keeps
    the row, since its enqueuer may have chosen a lane."""
    factory = apps.is_installed("objectives")
    return {
        "shows_objective": factory,
        "shows_lane": factory or job.kind != task_payload.KIND,
        "shows_organization": factory or job.organization_id is not None,
    }


def operator_actions(stream: str) -> list[dict[str, Any]]:
    """Redrives, replays and verifications recorded on the job's audit stream, newest first."""
    return [
        {"by": r.body.get("by"), "at": utc(r.ts), "text": audit.describe(r.body)}
        for r in reversed(audit.history(stream))
    ]


class JobPage(OwnChangePage, JobActions):
    """The job page part of `JobAdmin`, with the actions it runs."""

    job_template = "admin/jobs/job/job_page.html"

    def object_page(
        self, request: HttpRequest, job_id: str, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
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
        due = job.scheduled_for(now)  # a delayed job's runAt, or a retry's backoff
        diagnosed = diagnosis(job_id, now_ms=now)
        page_links, page_parts, page_errors = page_sections.collect(job)
        at_raw = request.GET.get("at")
        state_at = (
            state_at_panel(job_id, position_param(at_raw, count=count, default=count), count)
            if at_raw not in (None, "")
            else None
        )
        context = {
            "title": f"Job {job_id}",
            "app_label": self.opts.app_label,
            "job": job,
            "wire": wire,
            "fold_json": pretty_json(wire),
            "status_badge": status_badge(job.status),
            "task": task_row(job),
            **product_rows(job),
            "contract": contract.to_wire() if contract else None,
            "route_by_design": routing_by_design(job.agent_id, job.kind),
            "diagnosis": diagnosed,
            "diagnosis_facts": pretty_json(diagnosed["facts"]),
            "stream": info,
            "stream_url": stream_url(stream),
            "receipt_count": count,
            "created_utc": utc(job.created_at),
            "updated_utc": utc(job.updated_at),
            "lease_utc": utc(job.lease_until) if job.lease_until else None,
            "run_at_utc": utc(job.run_at) if job.run_at is not None else None,
            "scheduled": job.attempt == 0 and due is not None,
            "retrying": retrying_detail(job, due, now) if job.attempt and due else None,
            **chain_page(
                request, stream, count, default_after=max(0, count - PAGE_SIZE), panels=panels
            ),
            "state_at": state_at,
            "promises": promise_rows(job_id, now_ms=now),
            "commands": command_rows(job),
            "pending_commands": len(job.pending_commands),
            "progress": progress_panel(job_id),
            "operator_actions": operator_actions(stream),
            "audit_stream_url": stream_url(audit.stream_for(stream)),
            "page_links": page_links,
            "page_sections": page_parts,
            "page_errors": page_errors,
            "callbacks": dashboard.callbacks_block(),
            "callback_rows": callbacks.admin_rows(job_id),
            "command_error": panels.get("command_error"),
            "can_act": self.can_act(request),
            # steer and follow-up wait for the job's handler to pull them; the task handler
            # never does (a task function gets only the framework's TaskContext)
            "reads_commands": job.agent_id != task_payload.AGENT_ID,
            # an operator's retry: offered for a failed or canceled job outside an objective
            "can_retry": retry_refusal(job, include_canceled=True) is None,
            "retried": retried_detail(job) if job.retries else None,
            "last_attempt": job.retried_after_attempt + job.max_attempts,
            "events_url": reverse("job-events", args=(job_id,)),
            "changelist_url": reverse("admin:jobs_job_changelist"),
            "dashboard_url": reverse("admin:jobs_job_dashboard"),
            "none_html": NONE_HTML,
        }
        return self.render_page(request, self.job_template, context, extra_context)
