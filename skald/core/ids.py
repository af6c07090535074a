"""The one id factory for opaque identifiers (request ids, claim tokens, launch keys)."""

from __future__ import annotations

import secrets
import uuid


def new_uuid() -> uuid.UUID:
    return uuid.uuid4()


def new_token(nbytes: int = 16) -> str:
    return secrets.token_hex(nbytes)
