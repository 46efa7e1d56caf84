"""Partial objective and session indexes: most jobs have neither, and every write of a job
row (about three per job) added an entry to both. Lookups always name a value, which
implies the index's condition."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0010_lean_promise_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="job",
            name="job_objective_newest",
        ),
        migrations.RemoveIndex(
            model_name="job",
            name="job_session_status",
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("objective_id__isnull", False)),
                fields=["objective_id", "-created_at", "-id"],
                name="job_objective_newest",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("session_key__isnull", False)),
                fields=["session_key", "status"],
                name="job_session_status",
            ),
        ),
    ]
