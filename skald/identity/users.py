"""User accounts: deactivating, reactivating, setting roles and deleting, each one audited service.

What used to ride on model signals is explicit here, in the caller's order: the change, its audit
row, and the revocation it entails (``skald.identity.revocation.tokens_revoke``, in the same
transaction; the websockets close after commit). A user who is deactivated, or who held a role and
holds none after :func:`user_roles_set`, loses every token at once.

Not durable: the user admin calls them inside the transaction Django's admin opens around a change
form (the other fields of the form commit with them), and ``seed_demo`` inside its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.core.roles import Role
from skald.identity.revocation import sockets_close, tokens_revoke

ROLE_NAMES = frozenset(role.value for role in Role)
SUBJECT = "identity.account"


def roles_held(user: Any) -> set[str]:
    """The role names ``user`` holds now (read from the database, not a cache)."""
    return set(user.groups.filter(name__in=ROLE_NAMES).values_list("name", flat=True))


def forget_cached_roles(user: Any) -> None:
    if hasattr(user, "_skald_roles"):
        del user._skald_roles  # the cached role set of skald.core.roles.user_roles


def _audit(*, actor: Actor, kind: AuditKind, user: Any, **payload: Any) -> None:
    audit_append(actor=actor, kind=kind, subject_type=SUBJECT, subject_id=user.get_username()[:64],
                 payload={"user_id": user.pk, **payload})


def _locked(user: Any) -> Any:
    return get_user_model().objects.select_for_update().get(pk=user.pk)


def user_deactivate(*, actor: Actor, user: Any) -> bool:
    """Deactivate ``user`` and revoke every token they hold; returns whether they were active."""
    with transaction.atomic():
        if not _locked(user).is_active:
            user.is_active = False
            return False
        user.is_active = False
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        _audit(actor=actor, kind=AuditKind.USER_DEACTIVATED, user=user)
        tokens_revoke(user=user, reason="deactivated", actor=actor)
    return True


def user_reactivate(*, actor: Actor, user: Any) -> bool:
    """Let ``user`` sign in again (their old tokens stay revoked); returns whether they were inactive."""
    with transaction.atomic():
        if _locked(user).is_active:
            user.is_active = True
            return False
        user.is_active = True
        get_user_model().objects.filter(pk=user.pk).update(is_active=True)
        _audit(actor=actor, kind=AuditKind.USER_REACTIVATED, user=user)
    return True


def user_roles_set(*, actor: Actor, user: Any, groups: Iterable[Group]) -> bool:
    """Make ``user``'s groups exactly ``groups`` (the role groups among them and any others).

    A user who held a role and holds none afterwards has every token revoked. Returns whether
    anything changed (then one ``identity.roles_set`` row, before the revocation's own).
    """
    wanted = {group.pk: group for group in groups}
    with transaction.atomic():
        _locked(user)  # one change of a user's roles at a time
        held = {group.pk: group for group in user.groups.all()}
        added = [wanted[pk] for pk in sorted(wanted.keys() - held.keys())]
        removed = [held[pk] for pk in sorted(held.keys() - wanted.keys())]
        if not (added or removed):
            return False
        roles_before = {group.name for group in held.values()} & ROLE_NAMES
        if added:
            user.groups.add(*added)
        if removed:
            user.groups.remove(*removed)
        roles_after = {group.name for group in wanted.values()} & ROLE_NAMES
        _audit(actor=actor, kind=AuditKind.ROLES_SET, user=user,
               groups_added=sorted(group.name for group in added),
               groups_removed=sorted(group.name for group in removed), roles=sorted(roles_after))
        if roles_before and not roles_after:
            tokens_revoke(user=user, reason="last_role_removed", actor=actor)
    forget_cached_roles(user)
    return True


def user_delete(*, actor: Actor, user: Any) -> None:
    """Delete ``user`` (their tokens go with them); their websockets are told to close after commit."""
    with transaction.atomic():
        user_id = user.pk
        _audit(actor=actor, kind=AuditKind.USER_DELETED, user=user)
        user.delete()
        transaction.on_commit(lambda: sockets_close(user_id))
