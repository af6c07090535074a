"""Scheduled job: retry job-run deliveries a lost worker left undone (SPEC S4)."""

from django.db import migrations


def create_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name="skald.deliver_due_jobs",
        defaults={"func": "skald.tasks.deliver_due_jobs", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="skald.deliver_due_jobs").delete()


class Migration(migrations.Migration):
    dependencies = [("skald", "0007_jobs")]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
