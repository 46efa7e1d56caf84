"""`manage.py jobs enqueue|list|show|abort|steer|follow-up|redrive|retry|schedules|queues|limits`
(P-4),
`--json` for scripts.

Every write goes through the queue service, signed `by` the operator (`--by`, default
`cli:<OS user>`); a redrive goes through `jobs.redrive`, the admin's own service, which
records it on the job's audit stream (U-3).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from jobs import limits, queue, queues, redrive, retry, schedules, selectors, validation
from jobs.api.parameters import parse_limit
from jobs.api.serializers import JobFilter
from jobs.core.diagnosis import utc_text as utc
from jobs.errors import JobsError
from jobs.models import Job
from jobs.presenters import job_json
from jobs.tasks import payload as task_payload
from receipts import audit, store
from receipts.clock import now_ms as wall_clock_ms

# `jobs list` flags -> the GET /jobs filters; validated by the API's own JobFilter, so
# the CLI and the API accept (and refuse) exactly the same values.
LIST_FILTERS = {
    "status": "status",
    "agent": "agentId",
    "lane": "lane",
    "kind": "kind",
    "session_key": "sessionKey",
    "objective": "objectiveId",
    "org": "organizationId",
    "routed_group": "routedGroup",
}
DEFAULT_LIST_LIMIT = 20
# `jobs retry` filter flags -> the GET /jobs filters (status is the walk's, not a filter)
RETRY_FILTERS = {"kind": "kind", "agent": "agentId", "org": "organizationId"}
DRY_RUN_CAP = 10_000


def _json_arg(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"{name} is not valid JSON: {error}") from None


def _epoch_or_text(value: str | None) -> int | str | None:
    """`--run-at`: digits are epoch ms, anything else an ISO 8601 time (validated after)."""
    return int(value) if value is not None and value.isascii() and value.isdigit() else value


class Command(BaseCommand):
    help = "Enqueue, list, show and command jobs through the queue service."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        enqueue = sub.add_parser("enqueue", help="enqueue a job")
        enqueue.add_argument("agent_id")
        enqueue.add_argument("payload", help="payload JSON object, with kind and authContext")
        enqueue.add_argument("--job-id")
        enqueue.add_argument("--lane")
        enqueue.add_argument("--max-attempts", type=int)
        enqueue.add_argument("--session-key")
        enqueue.add_argument("--singleton-mode", choices=["allow", "cancel", "steer"])
        enqueue.add_argument("--queue", help="a worker group to run on instead of the kind's")
        enqueue.add_argument(
            "--run-at", help="not before this time: ISO 8601 with an offset or Z, or epoch ms"
        )
        enqueue.add_argument("--delay", type=float, help="not before this many seconds from now")
        enqueue.add_argument("--priority", type=int, help="-100..100, default 0")
        listing = sub.add_parser("list", help="newest jobs first")
        for option, api_name in LIST_FILTERS.items():
            hint: str | None
            if api_name == "kind":  # an open set: the deployment may register its own
                hint = "a built-in kind or one the deployment registered"
            else:
                allowed = JobFilter.allowed(api_name)
                hint = f"one of: {', '.join(allowed)}" if allowed else None
            listing.add_argument("--" + option.replace("_", "-"), help=hint)
        listing.add_argument(
            "--limit",
            default=None,
            help=f"page size, 1 to {selectors.MAX_LIMIT} (default {DEFAULT_LIST_LIMIT})",
        )
        listing.add_argument("--cursor", help="the nextCursor of the previous page")
        show = sub.add_parser("show", help="one job with its receipts")
        show.add_argument("job_id")
        abort = sub.add_parser("abort", help="abort a job (queued: canceled at once)")
        abort.add_argument("job_id")
        abort.add_argument("--reason")
        redrive = sub.add_parser("redrive", help="start a fresh delivery of a queued job now")
        redrive.add_argument("job_id")
        listed = sub.add_parser("schedules", help="list schedules, or pause, resume or run one now")
        listed.add_argument(
            "verb", nargs="?", default="list", choices=["list", "pause", "resume", "run-now"]
        )
        listed.add_argument("name", nargs="?", help="the schedule (pause, resume, run-now)")
        queued = sub.add_parser("queues", help="list worker groups, or pause or resume one")
        queued.add_argument("verb", nargs="?", default="list", choices=["list", "pause", "resume"])
        queued.add_argument("group", nargs="?", help="the worker group (pause, resume)")
        sub.add_parser("limits", help="rate limits and concurrency caps, and how full each is")
        retrying = sub.add_parser(
            "retry",
            help="retry a failed job, or every job a filter matches (--status), in batches",
        )
        retrying.add_argument("job_id", nargs="?", help="one job; else give --status")
        retrying.add_argument("--status", choices=["failed", "canceled"])
        for option in ("kind", "agent", "org"):
            retrying.add_argument("--" + option)
        retrying.add_argument("--since", help="settled at or after: ISO 8601, ms, or 30m/2h/7d ago")
        retrying.add_argument("--until", help="settled before; as --since")
        retrying.add_argument(
            "--include-canceled", action="store_true", help="one job: retry it if canceled too"
        )
        retrying.add_argument("--reason")
        retrying.add_argument("--limit", type=int, help="stop after this many jobs")
        retrying.add_argument("--batch-size", type=int, default=retry.BATCH)
        retrying.add_argument(
            "--dry-run", action="store_true", help="count the matching jobs, retry none"
        )
        for name in ("steer", "follow-up"):
            cmd = sub.add_parser(name, help=f"send a {name} command to an active job")
            cmd.add_argument("job_id")
            cmd.add_argument("payload", help="JSON payload")
        for sp in sub.choices.values():
            sp.add_argument("--json", action="store_true", help="machine-readable output")
            sp.add_argument("--by", default=None, help="who is acting (default: cli:<OS user>)")

    def handle(self, *args, action: str, **options):
        by = options.get("by") or audit.cli_actor()
        try:
            data = getattr(self, "_" + action.replace("-", "_"))(options, by)
        except JobsError as error:
            raise CommandError(f"{error.code}: {error}") from None
        if options["json"]:
            self.stdout.write(json.dumps(data, ensure_ascii=False))
        else:
            self._print(action, data)

    def _enqueue(self, o, by):
        result = queue.enqueue(
            o["agent_id"],
            _json_arg(o["payload"], "payload"),
            job_id=o["job_id"],
            lane=o["lane"],
            max_attempts=o["max_attempts"],
            session_key=o["session_key"],
            singleton_mode=o["singleton_mode"],
            by=by,
            queue=o["queue"],
            run_at=validation.run_at_from_wire(
                _epoch_or_text(o["run_at"]), o["delay"], now_ms=wall_clock_ms()
            ),
            priority=o["priority"],
        )
        return {
            "ok": True,
            "created": result.created,
            "job": job_json(result.job),
            "warnings": result.warnings,
        }

    def _list(self, o, by):
        given = {api: o[option] for option, api in LIST_FILTERS.items() if o[option] is not None}
        labels = {api: "--" + option.replace("_", "-") for option, api in LIST_FILTERS.items()}
        filters = JobFilter(given, queryset=Job.objects.none()).selector_filters(labels=labels)
        limit = parse_limit(o["limit"], default=DEFAULT_LIST_LIMIT, maximum=selectors.MAX_LIMIT)
        page = selectors.page(filters, limit=limit, cursor=o["cursor"])
        return {"jobs": [job_json(j) for j in page.jobs], "nextCursor": page.next_cursor}

    def _show(self, o, by):
        job = queue.require(o["job_id"])
        receipts = store.read(job.stream)
        return {
            "job": job_json(job),
            "receipts": [r.to_wire() for r in receipts],
            "verify": store.verify(job.stream).to_wire(),
        }

    def _abort(self, o, by):
        result = queue.abort(o["job_id"], reason=o["reason"], by=by)
        return {
            "ok": True,
            "canceled": result.canceled,
            "command": result.command,
            "job": job_json(result.job),
        }

    def _redrive(self, o, by):
        result = redrive.redrive_now(o["job_id"], by=by)
        return {
            "ok": result.started.created,
            "promiseId": result.started.promise_id,
            "reason": result.started.reason,
            "job": job_json(result.job),
        }

    def _schedules(self, o, by):
        verb, name = o["verb"], o["name"]
        if verb == "list":
            if name:
                raise CommandError("jobs schedules list takes no name")
            return {"schedules": schedules.listing()}
        if not name:
            raise CommandError(f"jobs schedules {verb} needs the schedule's name")
        if verb == "run-now":
            ran = schedules.run_now(name, by=by)
            return {"ok": True, "schedule": name, "job": job_json(ran.job)}
        state = (schedules.pause if verb == "pause" else schedules.resume)(name, by=by)
        return {
            "ok": True,
            "schedule": name,
            "status": state.status,
            "nextRunAt": state.next_run_at,
        }

    def _limits(self, o, by):
        now = wall_clock_ms()
        return {"limits": [limits.usage(limit, now_ms=now) for limit in limits.declared()]}

    def _queues(self, o, by):
        verb, group = o["verb"], o["group"]
        if verb == "list":
            if group:
                raise CommandError("jobs queues list takes no group")
            return {"queues": queues.listing()}
        if not group:
            raise CommandError(f"jobs queues {verb} needs the worker group's name")
        state = (queues.pause if verb == "pause" else queues.resume)(group, by=by)
        return {"ok": True, **queues.queue_json(group, state)}

    def _retry(self, o, by):
        bulk = [k for k in ("status", *RETRY_FILTERS, "since", "until") if o[k] is not None]
        if o["job_id"] is not None:
            if bulk or o["dry_run"] or o["limit"] is not None:
                raise CommandError("give a job id or a filter (--status ...), not both")
            done = retry.retry_job(
                o["job_id"], by=by, include_canceled=o["include_canceled"], reason=o["reason"]
            )
            return done.to_wire()
        if o["status"] is None:
            raise CommandError("give a job id, or --status failed|canceled to retry many")
        if o["include_canceled"]:
            raise CommandError("--include-canceled is for one job; use --status canceled")
        if not 1 <= o["batch_size"] <= 10_000 or (o["limit"] is not None and o["limit"] < 1):
            raise CommandError("--batch-size must be 1 to 10000 and --limit at least 1")
        given = {api: o[option] for option, api in RETRY_FILTERS.items() if o[option] is not None}
        labels = {api: "--" + option for option, api in RETRY_FILTERS.items()}
        filters = JobFilter(given, queryset=Job.objects.none()).selector_filters(labels=labels)
        now = wall_clock_ms()
        rows = retry.matching(
            filters,
            since_ms=retry.parse_moment(o["since"], name="since", now_ms=now),
            until_ms=retry.parse_moment(o["until"], name="until", now_ms=now),
        )
        if o["dry_run"]:
            found = rows.filter(status=o["status"], updated_at__lt=now).order_by()
            count = found[: DRY_RUN_CAP + 1].count()  # bounded: never a count of every job
            shown = f"{DRY_RUN_CAP}+" if count > DRY_RUN_CAP else str(count)
            return {"ok": True, "dryRun": True, "matching": shown}

        def progress(report: retry.BulkReport) -> None:
            if not o["json"]:
                self.stderr.write(
                    f"batch {report.batches}: {report.retried} retried, "
                    f"{report.skipped_total} skipped"
                )

        report = retry.retry_matching(
            rows,
            by=by,
            statuses=(o["status"],),
            reason=o["reason"],
            limit=o["limit"],
            batch_size=o["batch_size"],
            on_batch=progress,  # each batch stamps its own time: a long walk stays honest
        )
        return {"ok": not report.errors, **report.to_wire(), "summary": report.describe()}

    def _steer(self, o, by):
        result = queue.steer(o["job_id"], _json_arg(o["payload"], "payload"), by=by)
        return {"ok": True, "command": result.command, "job": job_json(result.job)}

    def _follow_up(self, o, by):
        result = queue.follow_up(o["job_id"], _json_arg(o["payload"], "payload"), by=by)
        return {"ok": True, "command": result.command, "job": job_json(result.job)}

    def _print(self, action: str, data: dict[str, Any]) -> None:
        if action == "schedules":
            self._print_schedules(data)
            return
        if action == "limits":
            for shown in data["limits"] or [{"name": "(no limit is declared)", "covers": ""}]:
                self.stdout.write(f"{shown['name']:<24} {shown['covers']}")
                if "rate" in shown:
                    rate = shown["rate"]
                    self.stdout.write(
                        f"  rate {rate['text']}: {rate['used']} of {rate['of']} in the "
                        f"window, {rate['held']} held"
                    )
                if "concurrency" in shown:
                    cap = shown["concurrency"]
                    per = f" per {cap['key']}" if cap["key"] else ""
                    busiest = ", ".join(
                        f"{entry['key'] or '-'} {entry['running']}/{cap['of']}"
                        for entry in cap["busiest"]
                    )
                    self.stdout.write(
                        f"  cap {cap['of']} at once{per}: {busiest or 'none running'}, "
                        f"{cap['held']} held"
                    )
            return
        if action == "queues":
            for q in data.get("queues") or [data]:
                since = f" by {q['pausedBy']} at {utc(q['pausedAt'])}" if q["paused"] else ""
                self.stdout.write(
                    f"{q['group']:<24} {'paused' if q['paused'] else 'running'}{since}"
                )
            return
        if action == "list":
            for job in data["jobs"]:
                # a task job by its task's path: every one is kind django.task
                kind = task_payload.shown_path(job["kind"], job["payload"]) or job["kind"]
                self.stdout.write(
                    f"{job['id']:<32} {job['status']:<9} {job['agentId']:<16} "
                    f"{kind or '-':<28} attempt {job['attempt']}/"
                    f"{job['maxAttempts']}"
                )
            if data["nextCursor"]:
                self.stdout.write(f"more: --cursor {data['nextCursor']}")
            return
        if action == "show":
            job = data["job"]
            self.stdout.write(json.dumps(job, indent=2, ensure_ascii=False))
            for r in data["receipts"]:
                self.stdout.write(
                    f"  #{r['streamSeq']:<4} {r['body']['type']:<24} {r['hash'][:16]}"
                )
            self.stdout.write(f"chain: {'ok' if data['verify']['ok'] else 'BROKEN'}")
            return
        if action == "retry" and "job" not in data:
            if data.get("dryRun"):
                self.stdout.write(f"retry: {data['matching']} job(s) match; none retried")
                return
            self.stdout.write(f"retry: {data['summary']}")
            for skipped in data["skippedJobs"]:
                self.stdout.write(f"  skipped {skipped['jobId']} ({skipped['refusal']})")
            for error in data["errors"]:
                self.stderr.write(f"  batch failed: {error}")
            if data["nextCursor"]:
                self.stdout.write("--limit reached; more jobs may match: run it again to go on")
            return
        job = data["job"]
        for warning in data.get("warnings") or []:
            self.stderr.write(f"warning: {warning}")
        extra = f" command {data['command']['id']}" if data.get("command") else ""
        if data.get("retry"):
            extra = f" (retry {data['retry']}, delivery {data['delivery']})"
        if data.get("promiseId"):
            extra = f" delivery {data['promiseId']} ({'started' if data['ok'] else data['reason']})"
        self.stdout.write(f"{action}: job {job['id']} is {job['status']}{extra}")

    def _print_schedules(self, data: dict[str, Any]) -> None:
        if "schedules" not in data:
            if "job" in data:
                self.stdout.write(
                    f"run-now: schedule {data['schedule']} enqueued {data['job']['id']}"
                )
            else:
                when = utc(data["nextRunAt"]) if data["status"] == "active" else "-"
                self.stdout.write(
                    f"schedule {data['schedule']} is {data['status']}, next run {when}"
                )
            return
        for s in data["schedules"]:
            outcome = s["lastOutcome"] or ("refused" if s["lastError"] else "-")
            self.stdout.write(
                f"{s['name']:<24} {s['status']:<8} {s['trigger']:<36} "
                f"next {utc(s['nextRunAt']) if s['nextRunAt'] else '-':<27} "
                f"last {s['lastJobId'] or '-'} ({outcome})"
            )
