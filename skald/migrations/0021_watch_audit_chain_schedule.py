"""Scheduled job: verify the audit chain's new rows every five minutes; a break is announced
(``audit.chain_broken``, docs/notifications.md)."""

from django.db import migrations


def create_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name="skald.watch_audit_chain",
        defaults={"func": "skald.tasks.watch_audit_chain", "schedule_type": "I", "minutes": 5, "repeats": -1},
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="skald.watch_audit_chain").delete()


class Migration(migrations.Migration):
    dependencies = [("skald", "0020_notifications")]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
