"""job_active_cells becomes a jobs.models.CoveringIndex: the same index on every database
(INCLUDE organization_id on PostgreSQL, none on SQLite, which always ignored it), so
nothing is rebuilt; only Django's model state changes, and SQLite projects stop being
warned about a covering column they never had (models.W040)."""

from django.db import migrations, models

import jobs.models

FIELDS = ["status", "lane", "worker_group", "created_at", "id"]
ACTIVE = models.Q(("status__in", ["queued", "leased", "running"]))


class Migration(migrations.Migration):
    dependencies = [("jobs", "0022_job_errors")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="job_active_cells"),
                migrations.AddIndex(
                    model_name="job",
                    index=jobs.models.CoveringIndex(
                        condition=ACTIVE,
                        covering=("organization_id",),
                        fields=FIELDS,
                        name="job_active_cells",
                    ),
                ),
            ]
        )
    ]
