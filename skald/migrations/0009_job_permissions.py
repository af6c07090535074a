"""Operators see and schedule jobs in the admin; everyone else sees their own through the API."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

OPERATOR_PERMISSIONS = ("view_scheduledjob", "add_scheduledjob", "change_scheduledjob", "view_jobrun")


def grant(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(*Permission.objects.filter(content_type__app_label="skald",
                                                     codename__in=OPERATOR_PERMISSIONS))


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for group in Group.objects.filter(name="operator"):
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="skald",
                                                            codename__in=OPERATOR_PERMISSIONS))


class Migration(migrations.Migration):
    dependencies = [("skald", "0008_deliver_due_jobs_schedule"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(grant, revoke)]
