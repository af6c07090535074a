"""Sign-in lockouts in the admin: django-axes' access attempts, lifted through the audited service.

Deleting an attempt (one or many) or the "Lift the lockout" action goes through
``skald.identity.lockout.lockout_lift``, so every lifted lockout leaves an ``identity.lockout_lifted``
row naming the admin who lifted it.
"""

from __future__ import annotations

from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.actors import Actor
from skald.identity.lockout import lockout_lift

if admin.site.is_registered(AccessAttempt):
    admin.site.unregister(AccessAttempt)


@admin.register(AccessAttempt)
class LockoutAdmin(AccessAttemptAdmin):
    actions = ["lift_lockout"]

    @admin.action(description="Lift the lockout (forget these failures)", permissions=["delete"])
    def lift_lockout(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        lifted = lockout_lift(actor=Actor.user(request.user), attempts=list(queryset))
        self.message_user(request, f"Lifted {lifted} lockout record(s).", messages.SUCCESS)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        lockout_lift(actor=Actor.user(request.user), attempts=[obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        lockout_lift(actor=Actor.user(request.user), attempts=list(queryset))
