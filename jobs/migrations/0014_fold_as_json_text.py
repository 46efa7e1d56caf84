"""The job row's fold is stored as `json` text on PostgreSQL instead of `jsonb`: it is
rewritten on every receipt of its job and read whole, never searched inside, and `jsonb`
parsed and reprinted it each time (receipts.json_text). On SQLite nothing changes. The
ALTER rewrites the table and its indexes once."""

from django.db import migrations

import receipts.json_text


def to_json(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE jobs_job ALTER COLUMN state TYPE json USING state::json")


def to_jsonb(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE jobs_job ALTER COLUMN state TYPE jsonb USING state::jsonb"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_settled_status_updated"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="state",
                    field=receipts.json_text.JSONTextField(),
                ),
            ],
            database_operations=[migrations.RunPython(to_json, to_jsonb)],
        ),
    ]
