"""Users from the identity provider: found by ``(issuer, sub)``, created on first sign-in, and their
roles and mapped security groups made to follow the provider's groups at every sign-in (audited)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.identity.models import ProviderGroupMapping, ProviderIdentity
from skald.identity.revocation import tokens_revoke
from skald.identity.users import ROLE_NAMES, forget_cached_roles


def provider_user_find(*, issuer: str, subject: str) -> Any | None:
    link = ProviderIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    return link.user if link is not None else None


def _free_username(wanted: str) -> str:
    user_model = get_user_model()
    base = (wanted or "user")[:140]
    name, n = base, 1
    while user_model.objects.filter(username=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def provider_user_create(*, issuer: str, subject: str, claims: dict[str, Any]) -> Any:
    """A new user for a provider account: no usable password (it signs in through the provider).

    Audited (``identity.user_created``, actor ``system:identity-provider``) in the same transaction.
    """
    with transaction.atomic():
        wanted = str(claims.get("preferred_username") or claims.get("email") or subject)
        user = get_user_model()(username=_free_username(wanted), email=str(claims.get("email") or ""))
        user.set_unusable_password()
        user.save()
        ProviderIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        audit_append(actor=Actor.system("identity-provider"), kind=AuditKind.USER_CREATED,
                     subject_type="identity.account", subject_id=user.get_username()[:64],
                     payload={"user_id": user.pk, "issuer": issuer, "subject": subject[:200]})
    return user


def provider_groups(claims: dict[str, Any], claim: str) -> list[str]:
    value = claims.get(claim) or []
    if isinstance(value, str):
        value = [value]
    return sorted({str(item) for item in value if isinstance(item, str | int)})


def provider_roles_apply(*, user: Any, groups: Iterable[str], method: str) -> bool:
    """Make ``user``'s roles (and mapped security groups) those the provider's ``groups`` map to.

    Roles are added before any is removed. A user who held a role and holds none afterwards has
    every token revoked, in the same transaction. Returns whether anything changed (then one audit
    row, before the revocation's).
    """
    groups = sorted(set(groups))
    mappings = list(ProviderGroupMapping.objects.filter(provider_group__in=groups))
    wanted_roles = {m.role for m in mappings if m.role}
    wanted_sgs = {m.security_group_id for m in mappings if m.security_group_id}
    managed_sgs = set(ProviderGroupMapping.objects.exclude(security_group=None)
                      .values_list("security_group_id", flat=True))
    with transaction.atomic():
        held_roles = set(user.groups.filter(name__in=ROLE_NAMES).values_list("name", flat=True))
        security_groups = user.security_groups  # approvals.SecurityGroup.users (by relation, no import)
        held_sgs = set(security_groups.filter(pk__in=managed_sgs).values_list("pk", flat=True))
        roles_added, roles_removed = sorted(wanted_roles - held_roles), sorted(held_roles - wanted_roles)
        sgs_added, sgs_removed = sorted(wanted_sgs - held_sgs), sorted(held_sgs - wanted_sgs)
        if roles_added:
            user.groups.add(*Group.objects.filter(name__in=roles_added))
        if sgs_added:
            security_groups.add(*sgs_added)
        if sgs_removed:
            security_groups.remove(*sgs_removed)
        if roles_removed:
            user.groups.remove(*Group.objects.filter(name__in=roles_removed))
        staff = bool(wanted_roles) or user.is_superuser
        if user.is_staff != staff:
            user.is_staff = staff
            user.save(update_fields=["is_staff"])
        ProviderIdentity.objects.filter(user=user).update(last_groups=groups)
        changed = bool(roles_added or roles_removed or sgs_added or sgs_removed)
        if changed:
            audit_append(actor=Actor.system("identity-provider"), kind=AuditKind.ROLES_FROM_PROVIDER,
                         subject_type="identity.account", subject_id=user.get_username()[:64],
                         payload={"user_id": user.pk, "method": method, "provider_groups": groups,
                                  "roles": sorted(wanted_roles), "roles_added": roles_added,
                                  "roles_removed": roles_removed, "security_groups_added": sgs_added,
                                  "security_groups_removed": sgs_removed})
        if held_roles and not wanted_roles:
            tokens_revoke(user=user, reason="last_role_removed", actor=Actor.system("identity-provider"))
    forget_cached_roles(user)
    return changed


def group_mapping_save(*, actor: Actor, mapping: ProviderGroupMapping, created: bool) -> ProviderGroupMapping:
    with transaction.atomic():
        mapping.full_clean()
        mapping.save()
        audit_append(actor=actor, kind=AuditKind.GROUP_MAPPING_CHANGED, subject_type="identity.group_mapping",
                     subject_id=mapping.pk, payload={"change": "created" if created else "updated",
                                                     "provider_group": mapping.provider_group, "role": mapping.role,
                                                     "security_group_id": mapping.security_group_id})
    return mapping


def group_mapping_delete(*, actor: Actor, mapping: ProviderGroupMapping) -> None:
    with transaction.atomic():
        audit_append(actor=actor, kind=AuditKind.GROUP_MAPPING_CHANGED, subject_type="identity.group_mapping",
                     subject_id=mapping.pk, payload={"change": "deleted", "provider_group": mapping.provider_group,
                                                     "role": mapping.role,
                                                     "security_group_id": mapping.security_group_id})
        mapping.delete()
