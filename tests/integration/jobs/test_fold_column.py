"""J-5: the job row's fold column. On PostgreSQL it is `json` text, not `jsonb`: kept
as the projector wrote it (no parse into a tree on the way in, no reprint on the way out),
read back as text by raw statements and as the fold by the ORM, on both databases."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from jobs import queue
from jobs.core.wire import job_to_wire
from jobs.models import Job
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db

AGENT = "test-fold-column"


def _wire(job_id: str) -> dict:
    job = queue.get(job_id)
    assert job is not None
    return job_to_wire(job)


def test_raw_reads_get_the_text_and_the_orm_the_fold():
    job = queue.enqueue(AGENT, payload("factory.run", note='ünïcode "quoted"')).job
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM jobs_job WHERE id = %s", [job.job_id])
        (text,) = cursor.fetchone()
    assert isinstance(text, str)
    assert json.loads(text) == _wire(job.job_id)
    assert Job.objects.get(pk=job.job_id).state == json.loads(text)


@pytest.mark.postgres_only
def test_postgresql_keeps_the_fold_as_written():
    job = queue.enqueue(AGENT, payload("factory.run", zeta=1, alpha=2)).job
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_typeof(state)::text, state FROM jobs_job WHERE id = %s", [job.job_id]
        )
        kind, text = cursor.fetchone()
    assert kind == "json"
    # jsonb would have sorted the keys (shortest first); json keeps the writer's order
    assert list(json.loads(text)) == list(_wire(job.job_id))
    assert list(json.loads(text)) != sorted(json.loads(text), key=lambda k: (len(k), k))


def test_an_orm_write_is_read_back_whole():
    job = queue.enqueue(AGENT, payload("factory.run")).job
    fold = {**Job.objects.get(pk=job.job_id).state, "lastError": "x" * 10_000, "n": 1.5}
    Job.objects.filter(pk=job.job_id).update(state=fold)
    assert Job.objects.get(pk=job.job_id).state == fold
