"""The deployment's GDL provider profile (SPEC L7, W5), parsed once from the environment.

Readiness and the inspector may show only the status: ``disabled | configured | invalid``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from django.conf import settings

from loop.errors import HarnessError

if TYPE_CHECKING:
    from loop.providers.profile import ProviderProfile

ProviderStatus = Literal["disabled", "configured", "invalid"]


@lru_cache(maxsize=1)
def _load() -> tuple[ProviderProfile | None, str]:
    from loop.providers.profile import profile_from_env

    try:
        return profile_from_env(settings.SKALD_PROVIDER_ENV), ""
    except HarnessError as exc:
        return None, str(exc)


def provider_profile() -> ProviderProfile | None:
    """The configured profile, or None in the deterministic posture (or when invalid)."""
    return _load()[0]


def provider_status() -> ProviderStatus:
    profile, error = _load()
    if error:
        return "invalid"
    return "configured" if profile is not None else "disabled"


def provider_error() -> str:
    """Why the profile is invalid (names variables, never values); empty when it is not."""
    return _load()[1]


def reset() -> None:
    """Forget the parsed profile (tests change the environment)."""
    _load.cache_clear()
