"""Scheduled job: record and export the audit chain head every five minutes (audit/heads.py)."""

from django.db import migrations

NAME = "audit.record_chain_head"


def create_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={"func": "audit.heads.chain_head_scheduled", "schedule_type": "I", "minutes": 5, "repeats": -1},
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0002_alter_auditevent_kind"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
