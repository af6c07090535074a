"""Audited refusals of input that carries a credential (SPEC L16).

The kernel refuses at admission and stores nothing; the write that tried to admit rolls back. The
refusal itself is recorded here, in a transaction of its own, with the kinds and the size of the
input — never the input.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.driver import InputRefused
from skald.core.errors import SkaldError


def input_refusal_record(
    *, user: AbstractBaseUser, refused: InputRefused, where: str, subject_type: str, subject_id: int | str,
    size: int,
) -> SkaldError:
    """Audit TRIPWIRE_REFUSED for ``refused`` and return the 400 error to raise to the caller.

    Args:
        where: Which input it was: ``chat_message``, ``gdl_ticket`` or ``gdl_back_referral``.
        size: The input's size in bytes.
    """
    with transaction.atomic():
        audit_append(actor=Actor.user(user), kind=AuditKind.TRIPWIRE_REFUSED, subject_type=subject_type,
                     subject_id=subject_id, payload={"where": where, "kinds": list(refused.kinds), "bytes": size})
    return SkaldError(str(refused), code=refused.code, http_status=400, kinds=list(refused.kinds))
