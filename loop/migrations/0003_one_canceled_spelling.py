"""Tool calls end ``canceled``, spelled like the ``canceled`` outcome (was ``cancelled``)."""

from django.db import migrations, models


def forwards(apps, schema_editor):
    apps.get_model("loop", "ToolCall").objects.filter(status="cancelled").update(status="canceled")


def backwards(apps, schema_editor):
    apps.get_model("loop", "ToolCall").objects.filter(status="canceled").update(status="cancelled")


class Migration(migrations.Migration):

    dependencies = [
        ('loop', '0002_redundant_session_indexes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='toolcall',
            name='status',
            field=models.CharField(choices=[('planned', 'Planned'), ('running', 'Running'), ('awaiting_human', 'Awaiting Human'), ('completed', 'Completed'), ('failed', 'Failed'), ('canceled', 'Canceled'), ('rejected', 'Rejected'), ('interrupted', 'Interrupted'), ('expired', 'Expired')], default='planned', max_length=16),
        ),
        migrations.RunPython(forwards, backwards),
    ]
