"""Roles are Django groups created by a migration; domain permissions are Django permissions."""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied


class Role(StrEnum):
    OPERATOR = "operator"  # launches runs, answers handoffs
    APPROVER = "approver"  # resolves approvals
    REVIEWER = "reviewer"  # disposes proposals
    AUDITOR = "auditor"  # reads and verifies audit
    WORKFLOW = "workflow"  # may call /workflow/... routes


class RoleRequired(PermissionDenied):
    """A refusal that names the roles that would allow it: the admin's 403 page says which is missing."""

    def __init__(self, action: str, *roles: Role) -> None:
        super().__init__(f"{action} needs the {' or '.join(role.value for role in roles)} role.")
        self.action = action
        self.roles = roles


# The principal agents act as. It never holds a role, whatever groups an operator gives it.
AGENT_PRINCIPAL = "agent@loopback"

# Each role's Django permissions. The migration skald/0002_roles keeps a frozen copy (migrations
# must not import code that changes); ``roles_ensure`` restores them (tests flush the database).
ROLE_PERMISSIONS: dict[Role, tuple[str, ...]] = {
    Role.OPERATOR: ("skald.write_case", "skald.view_case", "skald.view_run", "skald.view_scheduledjob",
                    "skald.add_scheduledjob", "skald.change_scheduledjob", "skald.view_jobrun"),
    Role.APPROVER: ("approvals.resolve_approval", "approvals.view_pendingapproval"),
    Role.REVIEWER: ("proposals.dispose_proposal", "proposals.view_proposal"),
    Role.AUDITOR: ("audit.view_auditevent",),
    Role.WORKFLOW: ("skald.write_case",),
}


def roles_ensure() -> None:
    """Create any missing role group with its permissions (idempotent)."""
    from django.contrib.auth.models import Group, Permission

    for role, dotted in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role.value)
        for name in dotted:
            app_label, codename = name.split(".")
            group.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))


def user_roles(user: AbstractBaseUser | AnonymousUser | None) -> frozenset[str]:
    """The roles a user holds (names of its groups that are roles). Cached on the user object."""
    if user is None or not user.is_authenticated or user.get_username() == AGENT_PRINCIPAL:
        return frozenset()
    cached = getattr(user, "_skald_roles", None)
    if cached is None:
        known = {role.value for role in Role}
        names = user.groups.values_list("name", flat=True)  # type: ignore[attr-defined]
        cached = frozenset(name for name in names if name in known)
        user._skald_roles = cached  # type: ignore[union-attr, attr-defined]
    return cached


# The roles that govern agents: each may read runs and cases, the context of every approval and proposal.
GOVERNANCE_ROLES = (Role.OPERATOR, Role.APPROVER, Role.REVIEWER, Role.AUDITOR)


def has_role(user: AbstractBaseUser | AnonymousUser | None, *roles: Role) -> bool:
    held = user_roles(user)
    return any(role.value in held for role in roles)
