"""How an audit row reads in the admin: the actor's name, a one-line summary, the subject's page,
and search by kind, user name and partial id. Presentation only; the rows are never changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import CharField, OuterRef, Q, Subquery
from django.db.models.functions import Cast
from django.urls import NoReverseMatch, reverse

from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.core.text import clip_to_line

# subject_type → (admin URL name, the app_label.Model whose view permission opens it)
SUBJECT_PAGES: dict[str, tuple[str, str]] = {
    "case": ("admin:skald_case_change", "skald.case"),
    "run": ("admin:skald_run_change", "skald.run"),
    "agent": ("admin:skald_agent_change", "skald.agent"),
    "approval": ("admin:approvals_pendingapproval_change", "approvals.pendingapproval"),
    "approval_rule": ("admin:approvals_approvalrule_change", "approvals.approvalrule"),
    "security_group": ("admin:approvals_securitygroup_change", "approvals.securitygroup"),
    "proposal": ("admin:proposals_proposal_change", "proposals.proposal"),
    "knowledge_entry": ("admin:proposals_knowledgeentry_change", "proposals.knowledgeentry"),
    "session": ("admin:loop_session_change", "loop.session"),
    "exchange": ("admin:loop_exchange_change", "loop.exchange"),
    "tool_call": ("admin:loop_toolcall_change", "loop.toolcall"),
}
# Payload fields worth a place in the one-line summary, in this order.
SUMMARY_FIELDS = ("tool", "name", "decision", "action", "status", "outcome", "from", "to", "title", "reason",
                  "changed", "seq", "kind")


def with_user_names(queryset: Any) -> Any:
    """Annotate ``actor_name`` (and ``subject_name`` for user subjects): one subquery each, no N+1."""
    users = get_user_model().objects.annotate(pk_text=Cast("pk", CharField()))
    actor = users.filter(pk_text=OuterRef("actor_id")).values("username")[:1]
    subject = users.filter(pk_text=OuterRef("subject_id")).values("username")[:1]
    return queryset.annotate(actor_name=Subquery(actor), subject_name=Subquery(subject))


def actor_text(row: AuditEvent) -> str:
    name = getattr(row, "actor_name", None)
    if row.actor_type == "user" and name:
        return name
    return f"{row.actor_type} {row.actor_id}"


def subject_text(row: AuditEvent) -> str:
    name = getattr(row, "subject_name", None) if row.subject_type == "user" else None
    return f"user {name}" if name else f"{row.subject_type.replace('_', ' ')} #{row.subject_id}"


def subject_url(row: AuditEvent, may_view: Any) -> str:
    """The subject's admin page, only if ``may_view("app.model")`` says the viewer may open it."""
    page = SUBJECT_PAGES.get(row.subject_type)
    if page is None or not may_view(page[1]) or not row.subject_id.isdigit():
        return ""
    try:
        return reverse(page[0], args=[row.subject_id])
    except NoReverseMatch:
        return ""


def payload_pretty(row: AuditEvent) -> str:
    """The payload as indented JSON (the stored text is canonical and compact: the hashed bytes)."""
    try:
        return json.dumps(json.loads(row.payload), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return row.payload


def kind_words(kind: int) -> str:
    if kind not in AuditKind.values:
        return f"unknown kind {kind}"  # a tampered row must still render
    return AuditKind(kind).name.lower().replace("_", " ")


def summary(row: AuditEvent) -> str:
    """``approval resolved — tool=write_file, decision=approve, reason=fine``: at most ~160 chars."""
    try:
        payload = json.loads(row.payload)
    except ValueError:
        payload = {}
    parts = []
    if isinstance(payload, dict):
        for key in SUMMARY_FIELDS:
            value = payload.get(key)
            if value not in (None, "", [], {}):
                shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                parts.append(f"{key}={clip_to_line(shown, 60)}")
    line = kind_words(row.kind) + (" — " + ", ".join(parts) if parts else "")
    return clip_to_line(line, 160)


HASH_PREFIX = re.compile(r"[0-9a-f]{6,64}")
SUBJECT = re.compile(r"([a-z][a-z _]*?)\s*#?\s*(\d+)")


def search_filter(term: str, user_ids: Iterable[int]) -> Q:
    """Rows a person means by ``term``: a kind (by words or label), a user (by name), a partial id,
    a hash or previous hash by its first six or more hex digits, a subject as a page names it ("run #1",
    "approval rule 3"), or text inside the payload (a tool name, a reason)."""
    term = term.strip()
    lowered = term.lower()
    kinds = [k for k in AuditKind if lowered in k.label.lower() or lowered in k.name.lower().replace("_", " ")]
    query = Q(subject_id__icontains=term) | Q(actor_id__icontains=term) | Q(payload__icontains=term)
    if HASH_PREFIX.fullmatch(lowered):
        query |= Q(hash__startswith=lowered) | Q(prev_hash__startswith=lowered)
    subject = SUBJECT.fullmatch(lowered)
    if subject:
        query |= Q(subject_type=subject.group(1).strip().replace(" ", "_"), subject_id=subject.group(2))
    if kinds:
        query |= Q(kind__in=kinds)
    ids = [str(pk) for pk in user_ids]
    if ids:
        query |= Q(actor_type="user", actor_id__in=ids) | Q(subject_type="user", subject_id__in=ids)
    return query


def matching_user_ids(term: str) -> list[int]:
    return list(get_user_model().objects.filter(username__icontains=term.strip()).values_list("pk", flat=True)[:50])


EXPORT_FIELDS = ["seq", "time", "kind", "kind_label", "actor_type", "actor_id", "actor_name", "subject_type",
                 "subject_id", "summary", "payload", "prev_hash", "hash"]


def export_row(row: AuditEvent) -> dict[str, Any]:
    return {"seq": row.seq, "time": row.time.isoformat(), "kind": row.kind, "kind_label": AuditKind(row.kind).label
            if row.kind in AuditKind.values else "", "actor_type": row.actor_type, "actor_id": row.actor_id,
            "actor_name": getattr(row, "actor_name", None) or "", "subject_type": row.subject_type,
            "subject_id": row.subject_id, "summary": summary(row), "payload": row.payload,
            "prev_hash": row.prev_hash, "hash": row.hash}
