"""The signals that drive sign-in audit and revocation; :func:`connect` runs once at start.

Order matters for failures: axes' own ``user_login_failed`` receiver (connected when the ``axes``
app loads, before Skald's) has already counted the attempt and marked the request when ours runs.
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from audit.actors import Actor
from audit.kinds import AuditKind
from skald.core.roles import Role
from skald.identity import signins
from skald.identity.revocation import sockets_close, tokens_revoke

_ROLE_NAMES = frozenset(role.value for role in Role)
_UID = "skald.identity"


def _on_logged_in(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    # A sign-in is recorded at the entrance it came through; a login() made outside any HTTP
    # request (the test client's force_login, a script) came through none and is not a sign-in.
    if user is None or request is None or not getattr(request, "path", ""):
        return
    method = getattr(request, "skald_sign_in_method", None) or "password"
    signins.signin_record(user=user, method=method, request=request)


def _on_login_failed(sender: Any, credentials: dict[str, Any] | None = None, request: Any = None,
                     **kwargs: Any) -> None:
    username = str((credentials or {}).get("username") or "")
    signins.signin_failure_record(username=username, method=getattr(request, "skald_sign_in_method", None)
                                  or "password", request=request,
                                  locked=bool(getattr(request, "axes_locked_out", False)))


def _on_locked_out(sender: Any, request: Any = None, username: str | None = None, ip_address: str | None = None,
                   **kwargs: Any) -> None:
    failures = int(getattr(request, "axes_failures_since_start", 0) or 0)
    if failures != settings.AXES_FAILURE_LIMIT:
        return  # axes repeats the signal for every attempt while locked; the lockout happened once
    signins.lockout_record(username=username or "", address=ip_address or "", request=request, failures=failures)


def _on_logged_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    if user is None or not getattr(user, "pk", None):
        return
    tokens_revoke(user=user, reason="signed_out", actor=Actor.user(user), kind=AuditKind.SIGNED_OUT,
                  detail={"entrance": signins.entrance_of(request), "address": signins.client_address(request)})


def _before_user_save(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.pk is None:
        instance._skald_was_active = False
        return
    instance._skald_was_active = sender.objects.filter(pk=instance.pk, is_active=True).exists()


def _after_user_save(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if getattr(instance, "_skald_was_active", False) and not instance.is_active:
        tokens_revoke(user=instance, reason="deactivated", actor=Actor.system("identity"))


def _roles_held(user_id: Any) -> set[str]:
    names = get_user_model().groups.through.objects.filter(user_id=user_id).values_list("group__name", flat=True)
    return {name for name in names if name in _ROLE_NAMES}


def _on_groups_changed(sender: Any, instance: Any, action: str, reverse: bool, model: Any, pk_set: Any,
                       **kwargs: Any) -> None:
    """Revoke when a user who held a role holds none any more (either side of the relation)."""
    if action not in {"pre_remove", "pre_clear", "post_remove", "post_clear"}:
        return
    if not reverse:
        user_ids = [instance.pk]
    elif pk_set is not None:
        user_ids = list(pk_set)
    else:
        user_ids = list(instance.user_set.values_list("pk", flat=True)) if action == "pre_clear" \
            else list(getattr(instance, "_skald_clearing", []))
        if action == "pre_clear":
            instance._skald_clearing = user_ids
    if action.startswith("pre_"):
        instance._skald_roles_before = {uid: bool(_roles_held(uid)) for uid in user_ids}
        return
    before = getattr(instance, "_skald_roles_before", {})
    users = get_user_model().objects.filter(pk__in=[uid for uid in user_ids if before.get(uid)])
    for user in users:
        if not _roles_held(user.pk):
            tokens_revoke(user=user, reason="last_role_removed", actor=Actor.system("identity"))


def _after_user_delete(sender: Any, instance: Any, **kwargs: Any) -> None:
    sockets_close(instance.pk)


def connect() -> None:
    """Connect every receiver (idempotent: each has a dispatch uid)."""
    user_model = get_user_model()
    user_logged_in.connect(_on_logged_in, dispatch_uid=f"{_UID}.logged_in")
    user_login_failed.connect(_on_login_failed, dispatch_uid=f"{_UID}.login_failed")
    user_locked_out.connect(_on_locked_out, dispatch_uid=f"{_UID}.locked_out")
    user_logged_out.connect(_on_logged_out, dispatch_uid=f"{_UID}.logged_out")
    pre_save.connect(_before_user_save, sender=user_model, dispatch_uid=f"{_UID}.pre_save")
    post_save.connect(_after_user_save, sender=user_model, dispatch_uid=f"{_UID}.post_save")
    post_delete.connect(_after_user_delete, sender=user_model, dispatch_uid=f"{_UID}.post_delete")
    m2m_changed.connect(_on_groups_changed, sender=user_model.groups.through, dispatch_uid=f"{_UID}.groups")
