"""The jobs with an error, failed or retrying, and nothing else (the admin's `error:<text>`
search), on PostgreSQL in two partial indexes: job_error_prefix, the first 100 characters
of the fold's `lastError` in `text_pattern_ops` (a `LIKE 'start%'` is a range of it
whatever the collation), now without the queued jobs that have no error (every enqueue
added an entry the search never read); and job_errors_newest, the same jobs newest first,
which a search matching many of them walks and stops (`jobs.admin.changelist`). SQLite
(development) has neither: its search reads the failed and queued jobs."""

from django.db import migrations

HAS_ERROR = "WHERE status IN ('failed', 'queued') AND (state ->> 'lastError') IS NOT NULL"
PREFIX = "((SUBSTRING((state ->> 'lastError'), 1, 100)) text_pattern_ops)"
FORWARD = (
    "DROP INDEX IF EXISTS job_error_prefix",
    f"CREATE INDEX job_error_prefix ON jobs_job {PREFIX} {HAS_ERROR}",
    f"CREATE INDEX job_errors_newest ON jobs_job (created_at DESC, id DESC) {HAS_ERROR}",
)
BACKWARD = (
    "DROP INDEX IF EXISTS job_errors_newest",
    "DROP INDEX IF EXISTS job_error_prefix",
    f"CREATE INDEX job_error_prefix ON jobs_job {PREFIX} WHERE status IN ('failed', 'queued')",
)


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0021_limits"),
    ]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
