"""job_active_cells keeps the organization in the index on PostgreSQL (the org-bound counts
read it index-only) and is a plain index on SQLite, without Django's models.W040 warning
on every check and migrate of a SQLite project (jobs.models.CoveringIndex)."""

from __future__ import annotations

import pytest
from django.db import connection

from jobs.models import Job

pytestmark = pytest.mark.django_db
INDEX = next(index for index in Job._meta.indexes if index.name == "job_active_cells")


def test_no_check_of_the_job_model_warns_about_its_indexes():
    warned = [message.id for message in Job.check(databases=["default"])]
    assert "models.W040" not in warned


def test_the_index_stores_the_organization_where_the_database_can():
    editor = connection.SchemaEditorClass(connection, collect_sql=True)  # nothing runs
    sql = str(INDEX.create_sql(Job, editor))
    assert '"status", "lane", "worker_group", "created_at", "id"' in sql
    covered = 'INCLUDE ("organization_id")' in sql
    assert covered is (connection.vendor == "postgresql")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="INCLUDE is PostgreSQL's")
def test_the_migrated_index_is_the_covering_one():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'job_active_cells'")
        (definition,) = cursor.fetchone()
    assert "INCLUDE (organization_id)" in definition
