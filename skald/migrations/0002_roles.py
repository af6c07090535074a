"""Create the role groups (operator, approver, reviewer, auditor, workflow) with their permissions."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLE_PERMISSIONS = {
    "operator": ["skald.write_case", "skald.view_case", "skald.view_run"],
    "approver": ["approvals.resolve_approval", "approvals.view_pendingapproval"],
    "reviewer": ["proposals.dispose_proposal", "proposals.view_proposal"],
    "auditor": ["audit.view_auditevent"],
    "workflow": ["skald.write_case"],
}


def create_roles(apps, schema_editor):
    # Permissions are normally created after migrate; make them exist now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        for dotted in perms:
            app_label, codename = dotted.split(".")
            group.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("skald", "0001_initial"),
        ("approvals", "0001_initial"),
        ("proposals", "0001_initial"),
        ("audit", "0001_initial"),
    ]
    operations = [migrations.RunPython(create_roles, drop_roles)]
