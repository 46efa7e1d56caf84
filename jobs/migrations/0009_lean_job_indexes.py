"""Fewer index entries per job write: every update of a job row that changes an indexed
column inserts into every index of the table, so the lease index covers held leases only,
and the `LIKE` index Django adds to a varchar primary key on PostgreSQL goes (job ids are
only ever looked up exactly)."""

from django.db import migrations, models

LIKE_INDEX = "jobs_job_id_e5bc7a75_like"


def drop_like_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {LIKE_INDEX}")


def restore_like_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} ON jobs_job (id varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0008_job_active_cells"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="job",
            name="job_status_lease",
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["leased", "running"])),
                fields=["status", "lease_until"],
                name="job_status_lease",
            ),
        ),
        migrations.RunPython(drop_like_index, restore_like_index),
    ]
