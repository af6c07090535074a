"""A 403 inside the admin (issue 35): in the admin's layout, naming the role the page needs.

Django's admin answers a refused page with a bare 403. Skald's ``handler403`` sends admin paths
here: the page says what was refused and which role would open it, from the same table that grants
roles their permissions (:data:`skald.core.roles.ROLE_PERMISSIONS`), or that only an administrator
may (a model no role reads: the kernel's store, users, the rules)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.utils.html import format_html
from django.utils.safestring import SafeString

from skald.core.roles import ROLE_PERMISSIONS, Role, RoleRequired, user_roles


def roles_granting(permission: str) -> list[Role]:
    return [role for role, granted in ROLE_PERMISSIONS.items() if permission in granted]


def _page_model(request: HttpRequest) -> type[Model] | None:
    """The model whose admin page was asked for, from the URL name (``app_model_change``…)."""
    try:
        name = resolve(request.path_info).url_name or ""
    except Resolver404:
        return None
    for model in admin.site._registry:
        if name.startswith(f"{model._meta.app_label}_{model._meta.model_name}_"):
            return model
    return None


def denial_reason(request: HttpRequest, exception: BaseException | None) -> SafeString:
    if isinstance(exception, RoleRequired):
        return _needs(exception.action, list(exception.roles))
    model = _page_model(request)
    if model is None:
        return format_html("This page is not open to your account.")
    plural = model._meta.verbose_name_plural
    roles = roles_granting(f"{model._meta.app_label}.view_{model._meta.model_name}")
    return _needs(f"Opening {plural}", roles)


def _needs(action: str, roles: list[Role]) -> SafeString:
    if not roles:
        return format_html("Only an administrator can do this: {} is not part of any role.", action.lower())
    names = SafeString(" or ".join(str(format_html("the <strong>{}</strong> role", role.value)) for role in roles))
    return format_html("{} needs {}.", action, names)


def admin_permission_denied(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Not allowed",
               "reason": denial_reason(request, exception),
               "roles_held": sorted(user_roles(request.user))}
    return render(request, "admin/403.html", context, status=403)

