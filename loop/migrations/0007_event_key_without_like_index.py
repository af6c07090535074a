"""A session event's idempotency key stays unique, by a named constraint instead of ``unique=True``:
on PostgreSQL the field option also built ``…_like`` (varchar_pattern_ops, for LIKE queries nobody
runs), one more index every appended row maintained (issue 14). The constraint's unique index is
what ``ON CONFLICT (idempotency_key)`` and the lookups by key use."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('loop', '0006_one_active_exchange'),
    ]

    operations = [
        migrations.AlterField(
            model_name='sessionevent',
            name='idempotency_key',
            field=models.CharField(max_length=200),
        ),
        migrations.AddConstraint(
            model_name='sessionevent',
            constraint=models.UniqueConstraint(fields=('idempotency_key',), name='loop_event_unique_key'),
        ),
    ]
