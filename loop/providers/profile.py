"""The server-owned provider profile (SPEC L7, W5).

Destination, model and secret come from the environment only: all four
``BRAIN_GDL_PROVIDER_*`` variables or none. A partial or malformed profile refuses to boot. Error
messages name variables, never their values: a URL, a path or a model name may itself be sensitive.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from loop.errors import HarnessError, ProviderError
from loop.providers.netguard import IPNetwork, parse_allow_cidrs, parse_endpoint

ENV_BASE_URL = "BRAIN_GDL_PROVIDER_BASE_URL"
ENV_MODEL = "BRAIN_GDL_PROVIDER_MODEL"
ENV_SECRET_FILE = "BRAIN_GDL_PROVIDER_SECRET_FILE"  # noqa: S105 - a variable name, not a secret
ENV_SECRET_ROOT = "BRAIN_GDL_PROVIDER_SECRET_ROOT"  # noqa: S105 - a variable name, not a secret
ENV_ALLOW_CIDRS = "BRAIN_GDL_PROVIDER_ALLOW_CIDRS"
ENV_CA_FILE = "BRAIN_GDL_PROVIDER_CA_FILE"
REQUIRED_VARIABLES = (ENV_BASE_URL, ENV_MODEL, ENV_SECRET_FILE, ENV_SECRET_ROOT)

SECRET_MAX_BYTES = 64 * 1024

ProfileStatus = Literal["disabled", "configured", "invalid"]


class ProviderProfileError(HarnessError):
    """The provider profile is partial or malformed; the process must not boot with it."""

    code = "provider_profile_invalid"


class ProviderSecretError(ProviderError):
    """The secret file could not be read safely. The message never carries the secret."""

    code = "provider_secret_invalid"


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    """Where the HTTP adapter sends requests and how it authenticates.

    Attributes:
        base_url: ``https://host[:port][/path]``; ``/chat/completions`` is appended.
        model: the model name sent on every request (server-owned, callers cannot pick it).
        secret_file: the API key file, relative to ``secret_root`` or absolute inside it.
        secret_root: the directory the secret file must resolve into.
        allow_cidrs: operator networks admitted despite SSRF screening.
        ca_file: an extra CA bundle trusted on top of the default one.
    """

    base_url: str
    model: str
    secret_file: str
    secret_root: str
    allow_cidrs: tuple[IPNetwork, ...] = ()
    ca_file: str | None = None


def profile_from_env(env: Mapping[str, str]) -> ProviderProfile | None:
    """Build the profile from ``env``: all four required variables, or none of them.

    Args:
        env: usually ``os.environ``.

    Returns:
        The profile, or None when no required variable is set (the deterministic posture).

    Raises:
        ProviderProfileError: a partial set or a malformed value; names variables only.
    """
    values = {name: env.get(name, "").strip() for name in REQUIRED_VARIABLES}
    missing = [name for name, value in values.items() if not value]
    if len(missing) == len(REQUIRED_VARIABLES):
        return None
    if missing:
        raise ProviderProfileError(
            f"provider profile is partial: {', '.join(missing)} not set; set all four "
            "BRAIN_GDL_PROVIDER_* variables or none"
        )
    try:
        parse_endpoint(values[ENV_BASE_URL])
    except ProviderError:
        raise ProviderProfileError(
            f"{ENV_BASE_URL} must be an https:// URL with a host and no userinfo, query or fragment"
        ) from None
    if not os.path.isabs(values[ENV_SECRET_ROOT]):
        raise ProviderProfileError(f"{ENV_SECRET_ROOT} must be an absolute path")
    if ".." in _parts(values[ENV_SECRET_FILE]):
        raise ProviderProfileError(f"{ENV_SECRET_FILE} must not contain '..'")
    try:
        allow = parse_allow_cidrs(env.get(ENV_ALLOW_CIDRS, ""))
    except ValueError as exc:
        raise ProviderProfileError(f"{ENV_ALLOW_CIDRS}: {exc}") from None
    ca_file = env.get(ENV_CA_FILE, "").strip() or None
    if ca_file is not None and not os.path.isabs(ca_file):
        raise ProviderProfileError(f"{ENV_CA_FILE} must be an absolute path")
    return ProviderProfile(
        base_url=values[ENV_BASE_URL],
        model=values[ENV_MODEL],
        secret_file=values[ENV_SECRET_FILE],
        secret_root=values[ENV_SECRET_ROOT],
        allow_cidrs=allow,
        ca_file=ca_file,
    )


def profile_status(env: Mapping[str, str]) -> ProfileStatus:
    """What readiness may say about the profile: never a URL, path, model or credential."""
    try:
        profile = profile_from_env(env)
    except ProviderProfileError:
        return "invalid"
    return "disabled" if profile is None else "configured"


def read_secret(profile: ProviderProfile) -> str:
    """Read the API key, confined to the secret root; called at request time, never cached.

    The file must resolve (symlinks followed) inside the real secret root, be a regular file, and
    hold one printable ASCII token (surrounding whitespace is stripped).

    Raises:
        ProviderSecretError: ``provider_secret_invalid``; the message names no path and no value.
    """
    if ".." in _parts(profile.secret_file):
        raise ProviderSecretError(f"{ENV_SECRET_FILE} must not contain '..'")
    root = os.path.realpath(profile.secret_root)
    if not os.path.isdir(root):
        raise ProviderSecretError(f"{ENV_SECRET_ROOT} is not a directory")
    target = os.path.realpath(os.path.join(profile.secret_root, profile.secret_file))
    if target == root or os.path.commonpath([root, target]) != root:
        raise ProviderSecretError(f"{ENV_SECRET_FILE} resolves outside {ENV_SECRET_ROOT}")
    raw = _read_regular_file(target)
    try:
        secret = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ProviderSecretError("the secret file is not ASCII") from None
    if not secret:
        raise ProviderSecretError("the secret file is empty")
    if any(not 0x21 <= ord(char) <= 0x7E for char in secret):
        # A newline or space inside would be a header-injection vector, not a bearer token.
        raise ProviderSecretError("the secret file must hold a single token without whitespace")
    return secret


def _read_regular_file(path: str) -> bytes:
    # O_NOFOLLOW: the path is already resolved, so a symlink appearing now is a swap attempt.
    # O_NONBLOCK: opening a FIFO must not hang the caller; fstat then refuses it.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ProviderSecretError(f"the secret file cannot be opened ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProviderSecretError("the secret file is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(SECRET_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > SECRET_MAX_BYTES:
        raise ProviderSecretError("the secret file is too large")
    return raw


def _parts(path: str) -> list[str]:
    return path.replace("\\", "/").split("/")
