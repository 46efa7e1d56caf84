from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0007_capacity_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["queued", "leased", "running"])),
                fields=["status", "lane", "worker_group", "created_at", "id"],
                include=("organization_id",),
                name="job_active_cells",
            ),
        ),
    ]
