"""Delayed jobs (G-3) and priorities (G-4) on the delivery promise.

`ordered_at` is where a promise stands in its group's queue (its take order: the time it
became deliverable less its priority's lead); the deliverable index orders by it instead
of `created_at`, so the take still reads its rows in index order. `due_at` holds a
scheduled driver promise out of that index until the due loop releases it; the scheduled
index finds those that came due by due time alone. Still one deliverable index, and a take
still changes no indexed column (a heap-only update, migration 0015). Open promises get
their creation time as their take order: the order they were being taken in."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_schedule"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="deliverypromise",
            name="promise_deliverable",
        ),
        migrations.AddField(
            model_name="deliverypromise",
            name="due_at",
            field=models.BigIntegerField(null=True),
        ),
        migrations.AddField(
            model_name="deliverypromise",
            name="ordered_at",
            field=models.BigIntegerField(db_default=0),
        ),
        migrations.RunSQL(
            "UPDATE jobs_delivery_promise SET ordered_at = created_at WHERE settled_at IS NULL",
            migrations.RunSQL.noop,
        ),
        migrations.AddIndex(
            model_name="deliverypromise",
            index=models.Index(
                condition=models.Q(
                    ("due_at__isnull", True), ("settled_at__isnull", True), ("worker_id__isnull", True)
                ),
                fields=["target_group", "ordered_at"],
                name="promise_deliverable",
            ),
        ),
        migrations.AddIndex(
            model_name="deliverypromise",
            index=models.Index(
                condition=models.Q(("due_at__isnull", False), ("settled_at__isnull", True)),
                fields=["due_at"],
                name="promise_scheduled",
            ),
        ),
    ]
