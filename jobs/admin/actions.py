"""What an operator does to jobs (U-3, U-7): the job page's actions (abort, steer,
follow-up, redrive, retry, replay, verify) and the changelist's bulk abort, redrive and
retry. Each goes through the service that owns it: `queue` (receipts with `by = <admin
username>`), `redrive` (on the job's audit stream), `retry` and `store.replay`, with
replay and verify put on record by `receipts.audit`. Nothing here writes a job row or a
receipt itself.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect

from jobs import queue, redrive, retry
from jobs.core.vocabulary import job_stream
from jobs.errors import JobNotFound, JobNotQueued, JobsError
from jobs.models import Job
from observability.logs import log_event
from receipts.admin import can_replay, can_verify, replay_on_record, verify_on_record
from receipts.admin_kit import OperatorAdmin, is_staff, parse_json_text, require

logger = logging.getLogger("jobs.admin")  # the whole jobs admin logs under one name

BULK_LIMIT = 500  # jobs one bulk action may touch; "select all" past it is refused
MAX_REASON = 2000
JOB_ACTIONS = ("abort", "steer", "follow_up", "redrive", "retry", "replay", "verify")
WRITE_ACTIONS = ("abort", "steer", "follow_up", "redrive", "retry")  # jobs.change_job (U-7)
# A bulk retry from the admin takes at most this many jobs a run (in batches of their own
# transactions, so a request stays short); running the action again takes the next ones.
RETRY_RUN_LIMIT = 2000
RETRY_COUNT_CAP = 10_000  # the confirmation page counts matches up to here, no further


def _reason(request: HttpRequest) -> str | None:
    return request.POST.get("reason", "").strip()[:MAX_REASON] or None


class JobActions(OperatorAdmin):
    """The actions part of `JobAdmin`."""

    actions = ("abort_selected", "redrive_selected", "retry_selected")
    abort_confirmation_template = "admin/jobs/job/abort_selected.html"
    retry_confirmation_template = "admin/jobs/job/retry_selected.html"

    def can_act(self, request: HttpRequest) -> bool:
        """abort, steer, follow-up and redrive: `jobs.change_job`."""
        return is_staff(request) and self.has_change_permission(request)

    # ---- on the job page -----------------------------------------------------------------------

    def _act(
        self, request: HttpRequest, job_id: str, panels: dict[str, Any]
    ) -> HttpResponse | None:
        """Run one posted action. A redirect after a write; panels for replay/verify/errors."""
        action = request.POST.get("action")
        if action not in JOB_ACTIONS:
            return HttpResponseBadRequest("unknown job action")
        by = request.user.get_username()
        stream = job_stream(job_id)
        if action in WRITE_ACTIONS:
            require(self.can_act(request))
        if action == "verify":
            require(can_verify(request))
            panels["verification"] = verify_on_record(
                request, stream, logger=logger, event="admin.job_verified"
            )
            return None
        if action == "replay":
            require(can_replay(request))
            panels["replay"] = replay_on_record(
                request, stream, logger=logger, event="admin.job_replayed"
            )
            return None
        try:
            if action == "abort":
                result = queue.abort(job_id, reason=_reason(request), by=by)
                text = (
                    "Job canceled (it was queued)."
                    if result.canceled
                    else "Abort command sent; the worker stops at its next heartbeat."
                )
            elif action in ("steer", "follow_up"):
                raw = request.POST.get("payload", "")
                payload, problem = parse_json_text(  # the textarea as JSON
                    raw,
                    missing='Enter a JSON payload, e.g. {"message": "..."}.',
                    invalid="The payload is not valid JSON",
                )
                if problem is not None:
                    panels["command_error"] = {"action": action, "message": problem, "text": raw}
                    return None
                result = queue.command(job_id, action, payload, by=by)
                text = f"{action.replace('_', '-')} command {result.command['id']} sent."
            elif action == "retry":
                done = retry.retry_job(
                    job_id,
                    by=by,
                    include_canceled=request.POST.get("include_canceled") == "1",
                    reason=_reason(request),
                )
                text = (
                    f"Job retried (retry {done.job.retries}): queued with "
                    f"{done.job.max_attempts} fresh attempt(s), delivery {done.started.promise_id}."
                )
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

    # ---- bulk, on the changelist -----------------------------------------------------------------

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
                "title": "Abort jobs",
                "jobs": list(
                    queryset.filter(pk__in=ids)
                    .order_by("-created_at", "-id")
                    .values("id", "status", "agent_id", "kind")
                ),
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                "reason_limit": MAX_REASON,
            }
            return self.render_page(request, self.abort_confirmation_template, context)
        reason, by = _reason(request), request.user.get_username()
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

    @admin.action(description="Retry failed jobs…", permissions=["change"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        """Retry the selected jobs, or with "select all" every job the filters match: the
        failed ones, and the canceled ones when the confirmation page says so. In batches
        (`retry.retry_matching`), at most RETRY_RUN_LIMIT a run."""
        statuses = ("failed", "canceled") if request.POST.get("include_canceled") else ("failed",)
        if request.POST.get("post") != "yes":
            context = {
                "title": "Retry jobs",
                "failed": self._bounded_count(queryset, "failed"),
                "canceled": self._bounded_count(queryset, "canceled"),
                "select_across": request.POST.get("select_across") == "1",
                "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                "run_limit": RETRY_RUN_LIMIT,
                "reason_limit": MAX_REASON,
            }
            return self.render_page(request, self.retry_confirmation_template, context)
        by = request.user.get_username()
        report = retry.retry_matching(
            queryset, by=by, statuses=statuses, reason=_reason(request), limit=RETRY_RUN_LIMIT
        )
        self.message_user(
            request, report.describe(), messages.ERROR if report.errors else messages.SUCCESS
        )
        if report.skipped_jobs:
            shown = "; ".join(f"{i} ({why})" for i, why in report.skipped_jobs)
            self.message_user(request, f"Skipped: {shown}", messages.WARNING)
        if report.next_cursor is not None:
            self.message_user(
                request,
                f"This run stopped after {RETRY_RUN_LIMIT} jobs; more may match. Run the "
                "action again to retry the next ones.",
                messages.WARNING,
            )
        return None

    @staticmethod
    def _bounded_count(queryset: QuerySet[Job], status: str) -> dict[str, Any]:
        """How many jobs of `status` the selection holds, counted up to RETRY_COUNT_CAP:
        {n, text}, the text "10,000+" past the cap."""
        found = queryset.filter(status=status).order_by()[: RETRY_COUNT_CAP + 1].count()
        text = f"{RETRY_COUNT_CAP:,}+" if found > RETRY_COUNT_CAP else f"{found:,}"
        return {"n": found, "text": text}
