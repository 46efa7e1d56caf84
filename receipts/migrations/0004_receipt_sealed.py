"""The sealed canonical text of each receipt (S-2, S-6).

Rows written before this migration keep NULL and are verified from their jsonb columns
as before: filling them would rewrite every receipt row (S-3 never updates one), and a
row whose jsonb already lost a number's spelling could not be sealed again anyway.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('receipts', '0003_alter_receipt_hash_alter_stream_updated_at_and_more'),
    ]

    operations = [
        migrations.AddField(
            model_name='receipt',
            name='sealed',
            field=models.TextField(null=True),
        ),
    ]
