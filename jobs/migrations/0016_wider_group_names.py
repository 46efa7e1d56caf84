"""Worker group names of up to 32 characters (a deployment's own groups): the routed
group of a job, the target group of a delivery promise, and a runworker's group and role.

On PostgreSQL a longer varchar is a catalog change: no table rewrite, and the indexes on
these columns (job_active_cells, job_group_busy, promise_deliverable) stay as they are.
SQLite never enforces a varchar length, so only Django's model state changes there; the
tables are not rebuilt."""

from django.db import migrations, models

COLUMNS = (
    ("jobs_job", "worker_group", 32),
    ("jobs_delivery_promise", "target_group", 32),
    ("jobs_worker_process", "group", 32),
    ("jobs_worker_process", "role", 48),
)
OLD = {"worker_group": 16, "target_group": 16, "group": 16, "role": 32}


def _alter(schema_editor, wide: bool) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, column, width in COLUMNS:
        schema_editor.execute(
            f'ALTER TABLE {table} ALTER COLUMN "{column}" TYPE varchar'
            f"({width if wide else OLD[column]})"
        )


def widen(apps, schema_editor):
    _alter(schema_editor, wide=True)


def narrow(apps, schema_editor):
    _alter(schema_editor, wide=False)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0015_hot_promise_takes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="worker_group",
                    field=models.CharField(max_length=32),
                ),
                migrations.AlterField(
                    model_name="deliverypromise",
                    name="target_group",
                    field=models.CharField(max_length=32),
                ),
                migrations.AlterField(
                    model_name="workerprocess",
                    name="group",
                    field=models.CharField(max_length=32, null=True),
                ),
                migrations.AlterField(
                    model_name="workerprocess",
                    name="role",
                    field=models.CharField(max_length=48),
                ),
            ],
            database_operations=[migrations.RunPython(widen, narrow)],
        ),
    ]
