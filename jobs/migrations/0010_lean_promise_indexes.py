"""Fewer index entries per delivery promise: a promise row is written about six times in
its life (opened, taken, claimed, settled...), each a new row version in every index whose
rows it matches. The timeout index holds pending promises only, and the `LIKE` index
Django adds to a varchar primary key on PostgreSQL goes (promise ids are only ever looked
up exactly)."""

from django.db import migrations, models

LIKE_INDEX = "jobs_delivery_promise_id_f057cbd4_like"


def drop_like_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {LIKE_INDEX}")


def restore_like_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} "
            "ON jobs_delivery_promise (id varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0009_lean_job_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="deliverypromise",
            name="promise_state_timeout",
        ),
        migrations.AddIndex(
            model_name="deliverypromise",
            index=models.Index(
                condition=models.Q(("state", "pending")),
                fields=["timeout_at"],
                name="promise_pending_timeout",
            ),
        ),
        migrations.RunPython(drop_like_index, restore_like_index),
    ]
