"""Scheduled jobs: expire overdue approvals every minute."""

from django.db import migrations


def create_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.get_or_create(
        name="skald.expire_approvals",
        defaults={"func": "skald.tasks.expire_approvals", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def drop_schedules(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="skald.expire_approvals").delete()


class Migration(migrations.Migration):
    dependencies = [("skald", "0002_roles"), ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [migrations.RunPython(create_schedules, drop_schedules)]
