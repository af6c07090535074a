"""Typed settings helpers: read the environment and fail loudly on a bad value.

Every secret ``NAME`` can also come from the file named by ``NAME_FILE`` (Docker/Kubernetes
secrets). Setting both is an error, so a stale variable never silently wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, env: Mapping[str, str]) -> str | None:
    value = env.get(name)
    file_name = env.get(f"{name}_FILE")
    if value is not None and file_name:
        raise ImproperlyConfigured(f"Set {name} or {name}_FILE, not both.")
    if file_name:
        try:
            return Path(file_name).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE cannot be read: {exc.strerror}") from None
    return value


def envstr(name: str, default: str = "", env: Mapping[str, str] = os.environ) -> str:
    value = _raw(name, env)
    return default if value is None else value


def envbool(name: str, default: bool, env: Mapping[str, str] = os.environ) -> bool:
    value = _raw(name, env)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}.")


def envint(
    name: str, default: int, *, minimum: int | None = None, env: Mapping[str, str] = os.environ
) -> int:
    value = _raw(name, env)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}.")
    return number


def envlist(name: str, default: list[str] | None = None, env: Mapping[str, str] = os.environ) -> list[str]:
    value = _raw(name, env)
    if value is None:
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]
