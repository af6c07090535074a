"""Conditional writes of tripwire patterns and allow-list entries for the policy API (issue 32): lock
the row, compare its ETag, then write through the admin's services (``tripwire_pattern_save`` …), in
one transaction — as :mod:`approvals.rules.conditional` does for rules and groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from django.db import transaction

from approvals.models import TripwireAllowEntry, TripwirePattern
from approvals.tripwires.services import (
    ALLOW_FIELDS,
    PATTERN_FIELDS,
    tripwire_allow_delete,
    tripwire_allow_save,
    tripwire_pattern_delete,
    tripwire_pattern_save,
)
from audit.actors import Actor
from skald.core.api.conditional import etag_of, precondition_check
from skald.core.errors import Conflict, NotFound

Row = TypeVar("Row", TripwirePattern, TripwireAllowEntry)
_FIELDS: dict[type, tuple[str, ...]] = {TripwirePattern: PATTERN_FIELDS, TripwireAllowEntry: ALLOW_FIELDS}
_NOT_FOUND = {TripwirePattern: ("tripwire_pattern_not_found", "tripwire pattern"),
              TripwireAllowEntry: ("tripwire_allow_not_found", "allow-list entry")}


def tripwire_view(row: TripwirePattern | TripwireAllowEntry) -> dict[str, Any]:
    """The row as its audit rows record it (and its ETag covers)."""
    return {"id": row.pk, **{name: getattr(row, name) for name in _FIELDS[type(row)]}}


def tripwire_etag(row: TripwirePattern | TripwireAllowEntry) -> str:
    return etag_of(tripwire_view(row))


def tripwire_get(model: type[Row], row_id: int) -> Row:
    row = model.objects.filter(pk=row_id).first()
    if row is None:
        code, noun = _NOT_FOUND[model]
        raise NotFound(f"No {noun} has id {row_id}.", code=code)
    return row


def tripwire_pattern_create(*, actor: Actor, fields: Mapping[str, Any]) -> TripwirePattern:
    """A new pattern (``tripwire_pattern_name_taken`` 409, ``tripwire_pattern_invalid`` 400)."""
    with transaction.atomic():
        _name_free(fields["name"], but=None)
        pattern = TripwirePattern(**{name: fields[name] for name in PATTERN_FIELDS if name in fields})
        return tripwire_pattern_save(actor=actor, pattern=pattern, changed=["created"])


def tripwire_allow_create(*, actor: Actor, fields: Mapping[str, Any]) -> TripwireAllowEntry:
    """A new allow-list entry (``tripwire_allow_invalid`` 400)."""
    with transaction.atomic():
        entry = TripwireAllowEntry(**{name: fields[name] for name in ALLOW_FIELDS if name in fields})
        return tripwire_allow_save(actor=actor, entry=entry, changed=["created"])


def tripwire_update(*, actor: Actor, model: type[Row], row_id: int, if_match: tuple[str, ...],
                    fields: Mapping[str, Any]) -> Row:
    """Change the fields given, if the row is still the version ``if_match`` names (404, 412, 409, 400)."""
    with transaction.atomic():
        row = _locked(model, row_id)
        precondition_check(if_match, tripwire_etag(row))
        changed = [name for name in _FIELDS[model] if name in fields and fields[name] != getattr(row, name)]
        if not changed:
            return row
        if "name" in changed:
            _name_free(fields["name"], but=row.pk)
        for name in changed:
            setattr(row, name, fields[name])
        if isinstance(row, TripwirePattern):
            tripwire_pattern_save(actor=actor, pattern=row, changed=changed)
        else:
            tripwire_allow_save(actor=actor, entry=row, changed=changed)
        return row


def tripwire_remove(*, actor: Actor, model: type[Row], row_id: int, if_match: tuple[str, ...]) -> dict[str, Any]:
    """Delete the row, if it is still the version ``if_match`` names; returns what it was."""
    with transaction.atomic():
        row = _locked(model, row_id)
        view = tripwire_view(row)
        precondition_check(if_match, etag_of(view))
        if isinstance(row, TripwirePattern):
            tripwire_pattern_delete(actor=actor, pattern=row)
        else:
            tripwire_allow_delete(actor=actor, entry=row)
        return view


def _locked(model: type[Row], row_id: int) -> Row:
    row = model.objects.select_for_update().filter(pk=row_id).first()
    if row is None:
        code, noun = _NOT_FOUND[model]
        raise NotFound(f"No {noun} has id {row_id}.", code=code)
    return row


def _name_free(name: str, *, but: int | None) -> None:
    taken = TripwirePattern.objects.filter(name=name)
    if but is not None:
        taken = taken.exclude(pk=but)
    if taken.exists():
        raise Conflict(f"A tripwire pattern is already named {name!r}.", code="tripwire_pattern_name_taken",
                       name=name)
