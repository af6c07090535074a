"""Scheduled job: the recovery sweep every minute (the fallback when no `skald_sweeper` runs)."""

from django.db import migrations


def create_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name="skald.sweep",
        defaults={"func": "skald.tasks.sweep", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="skald.sweep").delete()


class Migration(migrations.Migration):
    dependencies = [("skald", "0005_workspace_files")]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
