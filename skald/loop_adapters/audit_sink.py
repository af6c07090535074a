"""The kernel's AuditSink: kernel labels → audit kinds, principals → actors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from audit.actors import Actor
from audit.kinds import kind_for_label
from audit.services import AuditEntry, audit_append, audit_append_statement
from loop.ports import AuditRecord


class AuditChainSink:
    def append(
        self, label: str, *, principal: str, subject_type: str, subject_id: str, payload: Mapping[str, Any]
    ) -> None:
        audit_append(
            actor=Actor.parse(principal), kind=kind_for_label(label), subject_type=subject_type,
            subject_id=subject_id, payload=payload,
        )

    def append_statement(self, records: Sequence[AuditRecord]) -> tuple[str, list[Any]]:
        return audit_append_statement([
            AuditEntry(actor=Actor.parse(r.principal), kind=kind_for_label(r.label), subject_type=r.subject_type,
                       subject_id=r.subject_id, payload=r.payload)
            for r in records
        ])
