"""The jobs read model (J-5): one row per job, written only by `jobs.projector` inside
the append transaction of the job's receipts. Rebuildable from receipts (S-8)."""

from __future__ import annotations

import copy
from typing import Any

from django.db import models

from receipts.json_text import JSONTextField


class CoveringIndex(models.Index):
    """An index whose `covering` columns are stored in it (INCLUDE) where the database can
    (PostgreSQL: index-only scans), and a plain index elsewhere. Django's own `include`
    builds the same, but warns on every `migrate` and `check` of a SQLite project that
    SQLite ignores it (models.W040), for an index the project did not write."""

    def __init__(self, *args: Any, covering: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.covering = tuple(covering)

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        return path, args, {**kwargs, "covering": self.covering}

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        index = copy.copy(self)
        if schema_editor.connection.features.supports_covering_indexes:
            index.include = self.covering
        return models.Index.create_sql(index, model, schema_editor, using, **kwargs)


class Job(models.Model):
    id = models.CharField(max_length=128, primary_key=True)
    agent_id = models.CharField(max_length=128)
    lane = models.CharField(max_length=16)
    kind = models.CharField(max_length=64, null=True)
    status = models.CharField(max_length=16)
    session_key = models.CharField(max_length=255, null=True)
    organization_id = models.CharField(max_length=128, null=True)
    objective_id = models.CharField(max_length=128, null=True)
    worker_group = models.CharField(max_length=32)  # the routed group (K-5)
    # the concurrency cap's key its current attempt started under (jobs.core.limits)
    limit_key = models.CharField(max_length=200, null=True)
    attempt = models.IntegerField(default=0)
    lease_until = models.BigIntegerField(null=True)
    created_at = models.BigIntegerField()  # ms since epoch: ts of job.enqueued
    updated_at = models.BigIntegerField()  # ms since epoch: ts of the last receipt
    # the full fold, camelCase wire form (jobs.core.wire); `json` text on PostgreSQL
    state = JSONTextField()

    class Meta:
        db_table = "jobs_job"
        indexes = [
            # newest-first keyset pages, alone and under each filter of A-3 / U-1
            models.Index(fields=["-created_at", "-id"], name="job_newest"),
            models.Index(fields=["status", "-created_at", "-id"], name="job_status_newest"),
            models.Index(fields=["agent_id", "-created_at", "-id"], name="job_agent_newest"),
            models.Index(fields=["kind", "-created_at", "-id"], name="job_kind_newest"),
            models.Index(fields=["organization_id", "-created_at", "-id"], name="job_org_newest"),
            models.Index(  # partial: a job outside any objective adds no entry
                fields=["objective_id", "-created_at", "-id"],
                name="job_objective_newest",
                condition=models.Q(objective_id__isnull=False),
            ),
            # No newest-first index of lane or routed group: both have a handful of fixed
            # values, so their pages walk job_newest (or job_status_newest) and filter, and
            # their active rows are ranges of job_active_cells below; at three index
            # entries per job write that were served by nothing else, they cost every
            # enqueue and every status change more than they saved a page.
            # settlements by time: retention, the dashboard's and /metrics' recent counts
            # (partial: a job adds its entry when it settles, none while it is active)
            models.Index(
                fields=["status", "updated_at"],
                name="job_status_updated",
                condition=models.Q(status__in=["completed", "failed", "canceled"]),
            ),
            # lease expiry scans only look at held leases (partial: settled rows add nothing)
            models.Index(
                fields=["status", "lease_until"],
                name="job_status_lease",
                condition=models.Q(status__in=["leased", "running"]),
            ),
            models.Index(  # a cap's running jobs per key (partial: capped, running rows)
                fields=["limit_key"],
                name="job_limit_running",
                condition=models.Q(limit_key__isnull=False, status__in=["leased", "running"]),
            ),
            models.Index(  # partial: a job without a session key adds no entry
                fields=["session_key", "status"],
                name="job_session_status",
                condition=models.Q(session_key__isnull=False),
            ),
            # capacity in diagnosis: a group's busy jobs, oldest first, without walking the
            # settled history (partial: held rows only); the queue ahead of a job is a range
            # per lane of job_active_cells
            models.Index(
                fields=["worker_group", "created_at", "id"],
                name="job_group_busy",
                condition=models.Q(status__in=["leased", "running"]),
            ),
            # bounded counts of the dashboard, /metrics and /healthz: a range per (status,
            # lane, group) cell, read index-only up to its cap, and each queued cell's oldest
            # job first (partial: active rows only; the organization for org-bound metrics);
            # also the queue of a group, ahead of a job, one range per lane
            CoveringIndex(
                fields=["status", "lane", "worker_group", "created_at", "id"],
                name="job_active_cells",
                covering=("organization_id",),
                condition=models.Q(status__in=["queued", "leased", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class DeliveryPromise(models.Model):
    """D-1: the durable record that a driver or execute invocation was started and whether
    it settled. Delivery bookkeeping only: the receipt chain stays the authoritative queue."""

    FUNCTIONS = (("driver", "driver"), ("execute", "execute"))
    STATES = (
        ("pending", "pending"),
        ("resolved", "resolved"),
        ("rejected", "rejected"),
        ("canceled", "canceled"),
        ("timedout", "timedout"),
    )

    id = models.CharField(max_length=400, primary_key=True)
    function = models.CharField(max_length=8, choices=FUNCTIONS)
    job_id = models.CharField(max_length=128)
    attempt = models.IntegerField(null=True)
    target_group = models.CharField(max_length=32)  # a worker group, or "driver"
    dispatch_key = models.CharField(max_length=300)
    state = models.CharField(max_length=10, choices=STATES, default="pending")
    timeout_at = models.BigIntegerField()
    created_at = models.BigIntegerField()
    settled_at = models.BigIntegerField(null=True)
    worker_id = models.CharField(max_length=200, null=True)
    result = models.JSONField(null=True)
    # The promise is also the broker's task (jobs.runtime.promisebroker): deliverable while
    # unsettled and unclaimed once `available_at` passed; a take pushes it into the future
    # (a visibility timeout), so a crash between take and claim redelivers it. No index
    # holds it: a take then changes no indexed column and is a heap-only (HOT) update,
    # with no new entry in any index (pages are left half empty for it, migration 0015).
    available_at = models.BigIntegerField(default=0)
    # G-4: where the promise stands in its group's queue, lower taken first: the time it
    # became deliverable less its job's priority times the aging step
    # (jobs.core.scheduling.take_order; created_at itself for priority 0).
    ordered_at = models.BigIntegerField(db_default=0)
    # G-3: a driver promise of a job not yet due is opened scheduled: out of every take's
    # reach until the due loop (jobs.runtime.due) releases it at this time (sets it NULL).
    due_at = models.BigIntegerField(null=True)
    # An execute promise held back by a limit (jobs.limits): `rate:<limit>` (due again at
    # `due_at`) or `cap:<key>` (woken when a slot of the key frees).
    held_by = models.CharField(max_length=220, null=True)

    class Meta:
        db_table = "jobs_delivery_promise"
        indexes = [
            models.Index(fields=["job_id", "-created_at"], name="promise_job_newest"),
            # the timeout sweep and "pending for a job" only ever ask for pending promises;
            # a settled one leaves the index (fewer entries per settlement)
            models.Index(
                fields=["timeout_at"],
                name="promise_pending_timeout",
                condition=models.Q(state="pending"),
            ),
            models.Index(  # the broker takes in take order, skipping promises in flight
                fields=["target_group", "ordered_at"],
                name="promise_deliverable",
                condition=models.Q(
                    settled_at__isnull=True, worker_id__isnull=True, due_at__isnull=True
                ),
            ),
            models.Index(  # the due loop's lookup: scheduled promises by due time only
                fields=["due_at"],
                name="promise_scheduled",
                condition=models.Q(due_at__isnull=False, settled_at__isnull=True),
            ),
            models.Index(  # a freed slot wakes its key's oldest held delivery
                fields=["held_by", "ordered_at"],
                name="promise_held",
                condition=models.Q(held_by__isnull=False, settled_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.state})"


class WorkerProcess(models.Model):
    """D-11: a `runworker` process and its heartbeat."""

    id = models.CharField(max_length=200, primary_key=True)  # <role>:<host>:<pid>
    role = models.CharField(max_length=48)  # driver, or worker-<group>
    group = models.CharField(max_length=32, null=True)
    host = models.CharField(max_length=128)
    pid = models.IntegerField()
    concurrency = models.IntegerField(default=0)
    started_at = models.BigIntegerField()
    last_seen = models.BigIntegerField(db_index=True)
    stopped_at = models.BigIntegerField(null=True)
    released_at = models.BigIntegerField(null=True)  # its leases were released (gone/stopped)
    current_attempts = models.JSONField(default=list)
    info = models.JSONField(default=dict)

    class Meta:
        db_table = "jobs_worker_process"

    def __str__(self) -> str:
        return self.id


class LoopRun(models.Model):
    """L-6: the last run of each recovery loop in each process."""

    loop = models.CharField(max_length=64)
    process_id = models.CharField(max_length=200)
    last_started_at = models.BigIntegerField()
    last_finished_at = models.BigIntegerField(null=True)
    duration_ms = models.IntegerField(null=True)
    acted = models.IntegerField(default=0)
    runs = models.BigIntegerField(default=0)
    last_error = models.TextField(null=True)
    last_error_at = models.BigIntegerField(null=True)

    class Meta:
        db_table = "jobs_loop_run"
        constraints = [
            models.UniqueConstraint(fields=["loop", "process_id"], name="loop_process_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.loop}@{self.process_id}"


class RateSlot(models.Model):
    """A rate limit's ring of start times (jobs.limits): one row per start a window
    allows; a start takes the slot whose time left the window. Slot -1 is the cursor of
    held deliveries' due times. Bookkeeping only: each start is also its job's receipt."""

    limit_name = models.CharField(max_length=64)
    slot = models.IntegerField()
    started_at = models.BigIntegerField(default=0)  # ms since epoch

    class Meta:
        db_table = "jobs_rate_slot"
        constraints = [
            models.UniqueConstraint(fields=["limit_name", "slot"], name="rate_slot_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.limit_name}#{self.slot}"


class Counter(models.Model):
    """Monotonic counters per process (X-2), flushed every few seconds from memory, so a
    hot path never writes one: /metrics sums them over processes."""

    name = models.CharField(max_length=100)
    labels = models.CharField(max_length=300, default="")  # canonical `k="v",…` text
    process_id = models.CharField(max_length=200)
    value = models.FloatField(default=0)
    updated_at = models.BigIntegerField(default=0)

    class Meta:
        db_table = "jobs_counter"
        constraints = [
            models.UniqueConstraint(fields=["name", "labels", "process_id"], name="counter_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.labels}}}@{self.process_id}"


class Callback(models.Model):
    """D-8: one job event callback, written in the transaction of the write that caused
    it (a transactional outbox) and posted after commit, retried with backoff until it is
    delivered or its deadline passes (`jobs.callbacks`, sent by `jobs.runtime.callbacks`). Delivery bookkeeping
    only: settled rows are pruned after a retention period."""

    STATES = (("pending", "pending"), ("delivered", "delivered"), ("gave_up", "gave up"))

    id = models.BigAutoField(primary_key=True)
    job_id = models.CharField(max_length=128)
    event = models.CharField(max_length=16)  # dispatched | completed | failed | canceled
    url = models.TextField()  # where it goes, as configured when it was recorded
    body = models.JSONField()  # exactly what is posted, on every try
    state = models.CharField(max_length=10, choices=STATES, default="pending")
    attempts = models.IntegerField(default=0)  # tries started (a claim counts one)
    last_status = models.IntegerField(null=True)  # HTTP status of the last try; null: no answer
    last_error = models.TextField(null=True)
    created_at = models.BigIntegerField()
    next_at = models.BigIntegerField(null=True)  # next try; null once delivered or given up
    give_up_at = models.BigIntegerField()
    finished_at = models.BigIntegerField(null=True)  # delivered or given up

    class Meta:
        db_table = "jobs_callback"
        indexes = [
            models.Index(fields=["job_id", "-id"], name="callback_job_newest"),
            # the retry loop's scan: only pending rows are in it, so it stays small
            models.Index(
                fields=["next_at"], name="callback_due", condition=models.Q(state="pending")
            ),
            # counts of the last hour and the retention prune, by state
            models.Index(fields=["state", "finished_at"], name="callback_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.event} of {self.job_id} ({self.state})"


class Schedule(models.Model):
    """A schedule's read model: one row per `schedules/<name>` stream, written only by
    `jobs.schedule_projector` inside the append of its receipts; rebuildable from them.
    The scheduler's pass finds due schedules on `schedule_due`."""

    name = models.CharField(max_length=64, primary_key=True)
    agent_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=64, null=True)
    trigger = models.CharField(max_length=200)  # "cron 0 3 * * * (Europe/Paris)", "every 30 s"
    status = models.CharField(max_length=16)  # active | paused | removed
    organization_id = models.CharField(max_length=128, null=True)
    next_run_at = models.BigIntegerField(null=True)  # ms since epoch; null once removed
    last_run_at = models.BigIntegerField(null=True)
    last_job_id = models.CharField(max_length=128, null=True)
    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()
    receipt_count = models.IntegerField(default=0)
    head = models.CharField(max_length=64)
    state = JSONTextField()  # the fold, camelCase (jobs.core.schedule_state)

    class Meta:
        db_table = "jobs_schedule"
        indexes = [models.Index(fields=["status", "next_run_at"], name="schedule_due")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class Queue(models.Model):
    """A worker group's pause state: one row per `queues/<group>` stream (a group never
    paused has none), written only by `jobs.queues`' projector inside the append of its
    receipts; rebuildable from them. The database broker's take reads it by key."""

    name = models.CharField(max_length=32, primary_key=True)  # the worker group
    paused = models.BooleanField(default=False)
    paused_by = models.CharField(max_length=200, null=True)
    paused_at = models.BigIntegerField(null=True)  # ms since epoch
    updated_at = models.BigIntegerField()
    receipt_count = models.IntegerField(default=0)
    head = models.CharField(max_length=64)
    state = JSONTextField()  # the fold, camelCase (jobs.core.queue_state)

    class Meta:
        db_table = "jobs_queue"

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.paused else 'running'})"
