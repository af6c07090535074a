"""Identity in the admin: users (deactivation, roles and deletion through the audited services),
the provider-group mapping (audited) and sign-in lockouts (django-axes' access attempts, lifted
through the audited service).

The user page is Django's own ``UserAdmin``; what it saves with governance effects goes through
``skald.identity.users``: unticking *active* deactivates (tokens revoked), the groups field sets the
roles (losing the last one revokes), deleting closes the user's websockets. The rest of the form
(name, e-mail, staff, permissions) is saved as Django's admin saves it, in the same transaction.

Deleting an attempt (one or many) or the "Lift the lockout" action goes through
``skald.identity.lockout.lockout_lift``, so every lifted lockout leaves an ``identity.lockout_lifted``
row naming the admin who lifted it.
"""

from __future__ import annotations

from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.actors import Actor
from skald.identity.lockout import lockout_lift
from skald.identity.models import ProviderGroupMapping
from skald.identity.provider_users import group_mapping_delete, group_mapping_save
from skald.identity.users import user_deactivate, user_delete, user_reactivate, user_roles_set

User = get_user_model()

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


if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class SkaldUserAdmin(UserAdmin):
    """Django's user admin; activation, groups and deletion delegate to the identity services."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        activation = change and "is_active" in form.changed_data
        if activation:
            obj.is_active = form.initial["is_active"]  # the service makes the change (and audits it)
        super().save_model(request, obj, form, change)
        if activation and form.cleaned_data["is_active"]:
            user_reactivate(actor=Actor.user(request.user), user=obj)
        elif activation:
            user_deactivate(actor=Actor.user(request.user), user=obj)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        groups = form.cleaned_data.pop("groups", None)  # not saved by the form: the service sets them
        super().save_related(request, form, formsets, change)
        if groups is not None:
            user_roles_set(actor=Actor.user(request.user), user=form.instance, groups=groups)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        user_delete(actor=Actor.user(request.user), user=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for user in list(queryset):
            user_delete(actor=Actor.user(request.user), user=user)
