"""The receipts' body, context and hints are `json` text on PostgreSQL instead of `jsonb`
(receipts.json_text): every append parsed them into jsonb's tree, and every receipt is
appended once and read back from its sealed text, never from these columns. Their values
stay as they were (rows written under jsonb keep its respelled numbers, which verify
accepts). On SQLite nothing changes. The ALTER rewrites the table and its indexes once."""

from django.db import migrations

import receipts.json_text

COLUMNS = ("body", "context", "hints")


def _retype(schema_editor, to: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        changes = ", ".join(f"ALTER COLUMN {c} TYPE {to} USING {c}::{to}" for c in COLUMNS)
        schema_editor.execute(f"ALTER TABLE receipt_receipt {changes}")


def to_json(apps, schema_editor):
    _retype(schema_editor, "json")


def to_jsonb(apps, schema_editor):
    _retype(schema_editor, "jsonb")


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0006_byte_order_names"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="receipt",
                    name="body",
                    field=receipts.json_text.JSONTextField(),
                ),
                migrations.AlterField(
                    model_name="receipt",
                    name="context",
                    field=receipts.json_text.JSONTextField(null=True),
                ),
                migrations.AlterField(
                    model_name="receipt",
                    name="hints",
                    field=receipts.json_text.JSONTextField(null=True),
                ),
            ],
            database_operations=[migrations.RunPython(to_json, to_jsonb)],
        ),
    ]
