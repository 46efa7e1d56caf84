"""The jobs read model (J-5): one row per job, written only by `jobs.projector` inside
the append transaction of the job's receipts. Rebuildable from receipts (S-8)."""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    id = models.CharField(max_length=128, primary_key=True)
    agent_id = models.CharField(max_length=128)
    lane = models.CharField(max_length=16)
    kind = models.CharField(max_length=64, null=True)
    status = models.CharField(max_length=16)
    session_key = models.CharField(max_length=255, null=True)
    organization_id = models.CharField(max_length=128, null=True)
    objective_id = models.CharField(max_length=128, null=True)
    worker_group = models.CharField(max_length=16)  # the routed group (K-5)
    attempt = models.IntegerField(default=0)
    lease_until = models.BigIntegerField(null=True)
    created_at = models.BigIntegerField()  # ms since epoch: ts of job.enqueued
    updated_at = models.BigIntegerField()  # ms since epoch: ts of the last receipt
    state = models.JSONField()  # the full fold, camelCase wire form (jobs.core.reducer)

    class Meta:
        db_table = "jobs_job"
        indexes = [
            # newest-first keyset pages, alone and under each filter of A-3 / U-1
            models.Index(fields=["-created_at", "-id"], name="job_newest"),
            models.Index(fields=["status", "-created_at", "-id"], name="job_status_newest"),
            models.Index(fields=["agent_id", "-created_at", "-id"], name="job_agent_newest"),
            models.Index(fields=["kind", "-created_at", "-id"], name="job_kind_newest"),
            models.Index(fields=["organization_id", "-created_at", "-id"], name="job_org_newest"),
            models.Index(fields=["objective_id", "-created_at", "-id"], name="job_objective_newest"),
            models.Index(fields=["worker_group", "-created_at", "-id"], name="job_group_newest"),
            # recovery loops (L-1, L-2) and singleton scans (J-7..J-9)
            models.Index(fields=["status", "updated_at"], name="job_status_updated"),
            models.Index(fields=["status", "lease_until"], name="job_status_lease"),
            models.Index(fields=["session_key", "status"], name="job_session_status"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"
