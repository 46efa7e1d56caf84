"""Stream names, receipt ids and hashes compare byte by byte on PostgreSQL (collation
"C", as on SQLite, where nothing changes): the store's indexes lead with them and every
append compares its keys against theirs. The primary key of streams then serves a name
prefix itself, so the `LIKE` index Django added beside it goes (one index entry fewer per
new stream). One ALTER per table: its indexes are rebuilt once."""

from django.db import migrations

import receipts.models

COLUMNS = {
    "receipt_stream": [("name", 255), ("head", 64)],
    "receipt_receipt": [
        ("stream", 255),
        ("receipt_id", 40),
        ("prev", 64),
        ("hash", 64),
        ("event_id", 255),
    ],
    "receipt_tombstone": [("stream", 255), ("head", 64), ("retention_stream", 255)],
}
LIKE_INDEX = "receipt_stream_name_21eed0a3_like"


def _collate(schema_editor, collation: str) -> None:
    for table, columns in COLUMNS.items():
        changes = ", ".join(
            f'ALTER COLUMN {column} TYPE varchar({length}) COLLATE "{collation}"'
            for column, length in columns
        )
        schema_editor.execute(f"ALTER TABLE {table} {changes}")


def to_byte_order(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _collate(schema_editor, "C")
        schema_editor.execute(f"DROP INDEX IF EXISTS {LIKE_INDEX}")


def to_default_order(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _collate(schema_editor, "default")
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} ON receipt_stream "
            "(name varchar_pattern_ops)"
        )


def _name(model: str, field: str, length: int, **options) -> migrations.AlterField:
    return migrations.AlterField(
        model_name=model,
        name=field,
        field=receipts.models.NameField(max_length=length, **options),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0005_tombstone"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                _name("receipt", "event_id", 255, null=True),
                _name("receipt", "hash", 64),
                _name("receipt", "prev", 64, null=True),
                _name("receipt", "receipt_id", 40),
                _name("receipt", "stream", 255),
                _name("stream", "head", 64, null=True),
                _name("stream", "name", 255, primary_key=True, serialize=False),
                _name("tombstone", "head", 64),
                _name("tombstone", "retention_stream", 255),
                _name("tombstone", "stream", 255),
            ],
            database_operations=[migrations.RunPython(to_byte_order, to_default_order)],
        ),
    ]
