"""The embedded profile's data directory (``var/``): made by the entry points, never by settings.

Importing settings writes nothing; `manage.py`, the launcher and the test suite call
:func:`var_dir_prepare` before Django starts.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_KEY_FILE = "secret_key"  # noqa: S105 - a file name, not a secret
AUDIT_KEY_FILE = "audit_key"  # signs recorded audit chain heads (docs/audit-heads.md)


def var_dir_path(base_dir: Path) -> Path:
    """``SKALD_VAR_DIR``, or ``var/`` beside the project."""
    return Path(os.environ.get("SKALD_VAR_DIR") or base_dir / "var")


def var_dir_prepare(var_dir: Path) -> Path:
    """Create the directory and the embedded profile's secret key (kept so sessions survive a
    restart; 0600). Idempotent."""
    var_dir.mkdir(parents=True, exist_ok=True)
    for name in (SECRET_KEY_FILE, AUDIT_KEY_FILE):
        key = var_dir / name
        if not key.exists():
            try:
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another entry point made it meanwhile
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(secrets.token_urlsafe(50))
    return var_dir


def embedded_secret_key(var_dir: Path) -> str:
    """The key `var_dir_prepare` wrote; a process started without it gets a throwaway key (its
    signed cookies and tokens die with it) rather than a file written behind its back."""
    try:
        return (var_dir / SECRET_KEY_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return secrets.token_urlsafe(50)


def embedded_audit_key(var_dir: Path) -> str:
    """The embedded profile's chain-head signing key, or ``""`` (heads unsigned) when
    `var_dir_prepare` did not run: a throwaway key would sign heads nothing could check later."""
    try:
        return (var_dir / AUDIT_KEY_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""
