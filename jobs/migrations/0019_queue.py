import receipts.json_text
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0018_delayed_and_prioritized_promises"),
    ]

    operations = [
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("name", models.CharField(max_length=32, primary_key=True, serialize=False)),
                ("paused", models.BooleanField(default=False)),
                ("paused_by", models.CharField(max_length=200, null=True)),
                ("paused_at", models.BigIntegerField(null=True)),
                ("updated_at", models.BigIntegerField()),
                ("receipt_count", models.IntegerField(default=0)),
                ("head", models.CharField(max_length=64)),
                ("state", receipts.json_text.JSONTextField()),
            ],
            options={"db_table": "jobs_queue"},
        ),
    ]
