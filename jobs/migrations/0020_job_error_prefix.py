"""Failed and retrying jobs found by the start of their last error (the admin's
`error:<text>` search): on PostgreSQL a partial index of the first 100 characters of the
fold's `lastError`, in `text_pattern_ops` so a `LIKE 'start%'` is a range of it whatever
the database's collation. Only failed and queued jobs hold an entry (a completed job's
error is not looked for), so it costs a running job's writes nothing. The expression is
the one `jobs.admin.changelist.error_prefix` builds, to the letter. SQLite (development)
has no such index: its search reads the failed and queued jobs."""

from django.db import migrations

CREATE = (
    "CREATE INDEX IF NOT EXISTS job_error_prefix ON jobs_job "
    "((SUBSTRING((state ->> 'lastError'), 1, 100)) text_pattern_ops) "
    "WHERE status IN ('failed', 'queued')"
)
DROP = "DROP INDEX IF EXISTS job_error_prefix"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0019_queue"),
    ]

    operations = [migrations.RunPython(create, drop)]
