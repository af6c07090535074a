"""Credential tripwire policy writes (SPEC L16): organisation patterns and allow-list entries.

Each write is validated against what the kernel's detector will run (:func:`pattern_problems`)
and audited in the same transaction; the admin calls these and nothing else saves the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from approvals.models import TripwireAllowEntry, TripwirePattern
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.tripwires import pattern_problems
from skald.core.errors import SkaldError

PATTERN_FIELDS = ("name", "regex", "keywords", "enabled", "note")
ALLOW_FIELDS = ("regex", "reason", "enabled")


def tripwire_pattern_problems(*, name: Any, regex: Any, keywords: Any = "") -> dict[str, list[str]]:
    """Field → messages for a pattern the detector would refuse; empty when it is sound (pure)."""
    problems: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name.strip():
        problems["name"] = ["A name is required; refusals name the kind org:<name>."]
    found = pattern_problems(regex) if isinstance(regex, str) else ["A pattern is required."]
    if found:
        problems["regex"] = found
    if isinstance(keywords, str) and any(word != word.lower() for word in keywords.split(",")):
        problems["keywords"] = ["Keywords are matched in lowercase; write them in lowercase."]
    return problems


def tripwire_allow_problems(*, regex: Any, reason: Any) -> dict[str, list[str]]:
    """Field → messages for an allow-list entry the detector would refuse; empty when it is sound."""
    problems: dict[str, list[str]] = {}
    found = pattern_problems(regex) if isinstance(regex, str) else ["A pattern is required."]
    if found:
        problems["regex"] = found
    if not isinstance(reason, str) or not reason.strip():
        problems["reason"] = ["Say why this is not a credential: the reason is kept in the audit log."]
    return problems


def _view(row: TripwirePattern | TripwireAllowEntry, fields: Iterable[str]) -> dict[str, Any]:
    return {"id": row.pk, **{field: getattr(row, field) for field in fields}}


_AUDIT = {  # model → (kind, subject type, payload key, recorded fields)
    TripwirePattern: (AuditKind.TRIPWIRE_PATTERN_CHANGED, "tripwire_pattern", "pattern", PATTERN_FIELDS),
    TripwireAllowEntry: (AuditKind.TRIPWIRE_ALLOW_CHANGED, "tripwire_allow", "entry", ALLOW_FIELDS),
}


def _save(actor: Actor, row: TripwirePattern | TripwireAllowEntry, changed: Iterable[str]) -> None:
    kind, subject_type, key, fields = _AUDIT[type(row)]
    created = row.pk is None
    with transaction.atomic():
        row.save()
        audit_append(actor=actor, kind=kind, subject_type=subject_type, subject_id=row.pk,
                     payload={"created": created, "changed": sorted(set(changed)), key: _view(row, fields)})


def _delete(actor: Actor, row: TripwirePattern | TripwireAllowEntry) -> None:
    kind, subject_type, key, fields = _AUDIT[type(row)]
    with transaction.atomic():
        view, subject_id = _view(row, fields), row.pk
        row.delete()
        audit_append(actor=actor, kind=kind, subject_type=subject_type, subject_id=subject_id,
                     payload={"deleted": True, key: view})


def tripwire_pattern_save(*, actor: Actor, pattern: TripwirePattern, changed: Iterable[str]) -> TripwirePattern:
    """Create or update one organisation pattern and audit TRIPWIRE_PATTERN_CHANGED.

    Raises:
        SkaldError: ``tripwire_pattern_invalid`` (400) with ``fields`` naming each problem.
    """
    problems = tripwire_pattern_problems(name=pattern.name, regex=pattern.regex, keywords=pattern.keywords)
    if problems:
        raise SkaldError("The tripwire pattern is not valid.", code="tripwire_pattern_invalid", http_status=400,
                         fields=problems)
    _save(actor, pattern, changed)
    return pattern


def tripwire_pattern_delete(*, actor: Actor, pattern: TripwirePattern) -> None:
    """Delete one pattern; the audit row keeps what it was."""
    _delete(actor, pattern)


def tripwire_allow_save(*, actor: Actor, entry: TripwireAllowEntry, changed: Iterable[str]) -> TripwireAllowEntry:
    """Create or update one allow-list entry and audit TRIPWIRE_ALLOW_CHANGED with its reason.

    Raises:
        SkaldError: ``tripwire_allow_invalid`` (400) with ``fields`` naming each problem.
    """
    problems = tripwire_allow_problems(regex=entry.regex, reason=entry.reason)
    if problems:
        raise SkaldError("The allow-list entry is not valid.", code="tripwire_allow_invalid", http_status=400,
                         fields=problems)
    _save(actor, entry, changed)
    return entry


def tripwire_allow_delete(*, actor: Actor, entry: TripwireAllowEntry) -> None:
    """Delete one allow-list entry; the audit row keeps it and its reason."""
    _delete(actor, entry)
