"""Identity in the admin: the provider-group mapping (audited) and sign-in lockouts (django-axes'
access attempts, lifted through the audited service).

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
from skald.identity.models import ProviderGroupMapping
from skald.identity.provider_users import group_mapping_delete, group_mapping_save

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


@admin.register(ProviderGroupMapping)
class ProviderGroupMappingAdmin(admin.ModelAdmin):
    """Provider group → role / security group. Every change is audited (identity.group_mapping_changed)
    and takes effect at each user's next sign-in through the provider."""

    list_display = ["provider_group", "role", "security_group"]
    list_filter = ["role"]
    search_fields = ["provider_group"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        group_mapping_save(actor=Actor.user(request.user), mapping=obj, created=not change)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        group_mapping_delete(actor=Actor.user(request.user), mapping=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ProviderGroupMapping]) -> None:
        for mapping in list(queryset):
            group_mapping_delete(actor=Actor.user(request.user), mapping=mapping)
