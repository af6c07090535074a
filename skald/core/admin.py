"""Admin conventions every app shares."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest


class ReadOnlyMixin:
    """No add, change or delete for anybody: these rows change only through their services (an
    edited audit row is a broken chain; a parked call resolves through the approval service).
    A mixin so that model admins and inlines share it."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """A model admin that only shows."""


def admin_may_view(request: HttpRequest, site: admin.AdminSite, model: type[Model]) -> bool:
    """Whether ``site`` shows ``model`` and lets this viewer open it: a link the viewer may follow,
    never one that ends in a 403 or a 404 (issue 13: navigation shows only what the viewer may open)."""
    if not site.is_registered(model):
        return False
    return bool(site.get_model_admin(model).has_view_permission(request))


# The request an admin view is rendering for (set by Skald's site around every admin view, its
# template rendered inside). Model admins are shared by every request, so a column that depends on
# the viewer reads it here, never from an attribute a concurrent request may overwrite.
_viewer: ContextVar[HttpRequest | None] = ContextVar("skald_admin_viewer", default=None)


@contextmanager
def viewing(request: HttpRequest) -> Iterator[None]:
    token = _viewer.set(request)
    try:
        yield
    finally:
        _viewer.reset(token)


def current_viewer() -> HttpRequest | None:
    """The request the admin is rendering for, or None outside an admin view."""
    return _viewer.get()
