"""Role checks for DRF views. The default is authenticated + a role: never AllowAny."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from skald.core.roles import Role, has_role


class RoleRequired(BasePermission):
    """Authenticated and holding one of ``roles``. Subclass via :func:`roles`."""

    roles: tuple[Role, ...] = ()
    message = "Your role does not allow this."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and has_role(user, *self.roles))


def caller(request: Request) -> AbstractBaseUser:
    """The authenticated user of a request that passed a role permission."""
    user = request.user
    assert isinstance(user, AbstractBaseUser), "role permissions admit authenticated users only"
    return user


def read_or_write(*, read: type[BasePermission], write: type[BasePermission]) -> type[BasePermission]:
    """``read`` decides safe methods, ``write`` the others (e.g. operators write, others read)."""

    class ReadOrWrite(BasePermission):
        message = "Your role does not allow this."

        def has_permission(self, request: Request, view: Any) -> bool:
            chosen = read if request.method in SAFE_METHODS else write
            return chosen().has_permission(request, view)

    return ReadOrWrite


def roles(*required: Role) -> type[RoleRequired]:
    """A permission class that admits holders of any of ``required``."""
    name = "Has" + "Or".join(role.value.title() for role in required)
    return type(name, (RoleRequired,), {"roles": tuple(required)})


class AdminRequired(BasePermission):
    """Superusers only: the governance configuration itself (rules, groups, the policy document) is
    the admin's, whatever roles a user holds. The refusal's code is ``admin_required``."""

    message = "Only an administrator (a superuser) may read or change the governance configuration."
    code = "admin_required"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_superuser)
