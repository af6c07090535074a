"""Scheduled job: repair turns left open by a worker that died."""

from django.db import migrations


def create_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name="skald.repair_stale_exchanges",
        defaults={"func": "skald.tasks.repair_stale_exchanges", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="skald.repair_stale_exchanges").delete()


class Migration(migrations.Migration):
    dependencies = [("skald", "0003_schedules")]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
