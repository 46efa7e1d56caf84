"""Factory tables: the objective summary read model (O-1) and the durable ledger (W-1).

`ObjectiveSummary` is written only by `objectives.projector` inside the append
transaction of the objective's receipts; rebuildable from them (S-8). The ledger tables
sit beside the receipts and are written only by `objectives.ledger`, after the receipt
commit and best-effort (W-3): they are never the source of truth.
"""

from __future__ import annotations

from django.db import models


class ObjectiveSummary(models.Model):
    id = models.CharField(max_length=64, primary_key=True)  # the objective id
    title = models.CharField(max_length=300)
    status = models.CharField(max_length=24)
    phase = models.CharField(max_length=24)
    mode = models.CharField(max_length=16)
    severity = models.SmallIntegerField(default=3)
    section = models.CharField(max_length=20)  # board section (objectives.core.board)
    archived = models.BooleanField(default=False)
    active = models.BooleanField(default=True)  # not settled-and-audited: the watchdog scans these
    organization_id = models.CharField(max_length=128, null=True)
    task_counts = models.JSONField(default=dict)  # shown task status -> count (core.board)
    slot_held = models.BooleanField(default=False)  # delivery repo slot (O-4)
    control_outbox_pending = models.BooleanField(default=False)  # requested, not enqueued (L-3)
    control_request_pending = models.BooleanField(default=False)  # requested, not consumed
    created_at = models.BigIntegerField()  # ms since epoch
    updated_at = models.BigIntegerField()  # ms since epoch of the last receipt
    receipt_count = models.IntegerField(default=0)
    head = models.CharField(max_length=64)
    state = models.JSONField()  # the full fold, camelCase (objectives.core.state)

    class Meta:
        db_table = "objectives_summary"
        verbose_name = "objective"
        verbose_name_plural = "objectives"
        indexes = [
            models.Index(fields=["section", "-updated_at"], name="objective_section_recent"),
            models.Index(
                fields=["organization_id", "section", "-updated_at"],
                name="objective_org_section_recent",
            ),
            models.Index(fields=["active", "updated_at"], name="objective_active_updated"),
            models.Index(
                fields=["control_outbox_pending", "updated_at"], name="objective_outbox_pending"
            ),
            models.Index(fields=["status", "updated_at"], name="objective_status_updated"),
            models.Index(fields=["slot_held", "mode"], name="objective_slot_held"),
        ]
        permissions = [
            ("control_objective", "Can react, note, cancel, archive and promote objectives"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


WORKFLOW_STATUSES = ("idle", "pending", "running", "completed", "failed", "canceled")
ACTIVITY_STATUSES = ("pending", "running", "completed", "failed", "canceled")


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


class Workflow(models.Model):
    """W-1: one durable workflow (objective control, or a factory run)."""

    key = models.CharField(max_length=400, primary_key=True)
    name = models.CharField(max_length=64)  # the contract's durableWorkflow
    status = models.CharField(max_length=10, choices=_choices(WORKFLOW_STATUSES), default="idle")
    revision = models.IntegerField(default=0)
    input = models.JSONField(null=True)
    metadata = models.JSONField(default=dict)
    output = models.JSONField(null=True)
    error = models.TextField(null=True)
    objective_id = models.CharField(max_length=64, null=True, db_index=True)
    # the mutation last applied: (job created at, job id, receipts of the job) only grows
    job_id = models.CharField(max_length=128)
    job_created_at = models.BigIntegerField()
    position = models.IntegerField()
    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()
    completed_at = models.BigIntegerField(null=True)

    class Meta:
        db_table = "objectives_workflow"

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


class Signal(models.Model):
    """W-1: a signal sent to a workflow (queue commands on its jobs, recorded as they pass)."""

    workflow_key = models.CharField(max_length=400, db_index=True)
    name = models.CharField(max_length=32)
    job_id = models.CharField(max_length=128)
    payload = models.JSONField(null=True)
    created_at = models.BigIntegerField()

    class Meta:
        db_table = "objectives_signal"

    def __str__(self) -> str:
        return f"{self.workflow_key} {self.name}"


class Activity(models.Model):
    """W-1: one durable activity (a codex task run)."""

    key = models.CharField(max_length=400, primary_key=True)
    job_id = models.CharField(max_length=128, db_index=True)
    objective_id = models.CharField(max_length=64, null=True, db_index=True)
    status = models.CharField(max_length=10, choices=_choices(ACTIVITY_STATUSES), default="pending")
    attempts = models.IntegerField(default=0)
    active_attempt = models.IntegerField(null=True)
    active_owner = models.CharField(max_length=200, null=True)
    last_heartbeat = models.BigIntegerField(null=True)
    checkpoint_revision = models.IntegerField(default=0)
    checkpoint_output = models.JSONField(null=True)
    checkpoint_metadata = models.JSONField(null=True)
    position = models.IntegerField(default=0)  # receipts of the job applied (ordering guard)
    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()

    class Meta:
        db_table = "objectives_activity"
        verbose_name_plural = "activities"

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


class ActivityAttempt(models.Model):
    activity_key = models.CharField(max_length=400)
    attempt = models.IntegerField()
    owner = models.CharField(max_length=200, null=True)
    status = models.CharField(max_length=10, choices=_choices(ACTIVITY_STATUSES), default="running")
    error = models.TextField(null=True)
    started_at = models.BigIntegerField()
    ended_at = models.BigIntegerField(null=True)

    class Meta:
        db_table = "objectives_activity_attempt"
        constraints = [
            models.UniqueConstraint(
                fields=["activity_key", "attempt"], name="activity_attempt_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.activity_key}#{self.attempt}"
