"""Proposal writes: capture when a run resolves, accept, reject (SPEC Q1, Q2).

Close proposes; only the gate disposes. Capture turns what an agent proposed into *pending* rows
and never publishes anything; only a reviewer's acceptance writes knowledge that later runs read.
Each service is atomic with its audit rows in the same transaction.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.urls import reverse

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.models import Exchange, ExchangeStatus, Session, SessionEvent, ToolCall, ToolCallStatus
from proposals import evidence
from proposals.evidence import EventRow
from proposals.models import KnowledgeEntry, KnowledgeRevision, Proposal, ProposalStatus
from proposals.selectors import entry_slug, knowledge_entry_target
from skald.core import clock
from skald.core.errors import Conflict, Forbidden, NotFound, SkaldError
from skald.core.roles import Role, has_role
from skald.models import Run
from skald.notifications.events import Event, EventKind
from skald.notifications.models import Risk
from skald.notifications.services import notification_record

CAPTURE_TOOL = "propose_knowledge"
REASON_MAX = 2000
BODY_MAX = 32000
CAPTURER = Actor.system("capture")

Reviewer = AbstractBaseUser | AnonymousUser  # what a request carries; anything but a reviewer is refused


@dataclass(frozen=True, slots=True)
class _Draft:
    source_key: str
    title: str
    body: str
    evidence: dict[str, Any]


# --- capture -----------------------------------------------------------------------------------


def capture_proposals_on_resolve(*, run: Run) -> list[Proposal]:
    """Turn what ``run`` proposed into pending proposals; idempotent.

    Candidates are the completed ``propose_knowledge`` calls of the run's session (the stored call
    arguments are the candidate). A run that proposed nothing at all contributes its final answer
    (the root agent's last words in the last settled exchange) instead. Each proposal carries an
    evidence snapshot: case, ticket, run, and excerpts of the session events it came from.

    Call it when a run resolves, inside or outside the caller's transaction. Capturing again
    (a retry, a later resolve) skips what is already captured, by ``source_key``.

    Returns:
        The proposals this call created, in call order (empty when all were captured already).
    """
    with transaction.atomic():
        # Serialise captures of one run; the unique source_key is the last line behind this.
        locked = Run.objects.select_for_update(of=("self",)).select_related(
            "case", "launched_by", "session").get(pk=run.pk)
        captured = set(Proposal.objects.filter(session_id=locked.session_id).values_list("source_key", flat=True))
        drafts = _drafts(locked, captured)
        now = clock.now()
        created = []
        for draft in drafts:
            proposal = Proposal.objects.create(
                run=locked, session_id=locked.session_id, title=draft.title, body=draft.body,
                evidence=draft.evidence, status=ProposalStatus.PENDING, source_key=draft.source_key, created_at=now,
            )
            audit_append(
                actor=CAPTURER, kind=AuditKind.PROPOSAL_CAPTURED, subject_type="proposal", subject_id=proposal.pk,
                payload={"run": locked.pk, "session": locked.session_id, "source_key": draft.source_key,
                         "title": draft.title, "cited_seqs": [e["seq"] for e in draft.evidence["events"]]},
            )
            _announce_pending(proposal, locked)  # the outbox row commits with the capture
            created.append(proposal)
    return created


def _announce_pending(proposal: Proposal, run: Run) -> None:
    notification_record(event=Event(
        kind=EventKind.PROPOSAL_PENDING, subject=f"proposal:{proposal.pk}", summary=f"Review: {proposal.title}",
        link_path=reverse("admin:proposals_proposal_change", args=[proposal.pk]), occurred_at=proposal.created_at,
        requested_by=run.launched_by.get_username(), risk=Risk.LOW, agent=run.session.agent, case=str(run.case_id),
        facts={"proposal": proposal.pk, "title": proposal.title, "run": run.pk}))


def _drafts(run: Run, captured: set[str]) -> list[_Draft]:
    calls = list(
        ToolCall.objects.filter(session_id=run.session_id, tool=CAPTURE_TOOL, status=ToolCallStatus.COMPLETED)
        .select_related("frame", "exchange")
        .order_by("id")
    )
    if calls:
        fresh = [call for call in calls if f"call:{call.pk}" not in captured]
        rows = _rows_by_exchange(call.exchange_id for call in fresh)
        return [_call_draft(run, call, rows[call.exchange_id]) for call in fresh]
    last = (
        Exchange.objects.filter(session_id=run.session_id, status=ExchangeStatus.SETTLED).order_by("-number").first()
    )
    if last is None or f"answer:{last.pk}" in captured:
        return []
    answered = _rows_by_exchange([last.pk])[last.pk]
    answer = evidence.final_answer(answered)
    if answer is None:
        return []
    body = str(answer.payload.get("content", "")).strip()
    return [
        _Draft(
            source_key=f"answer:{last.pk}",
            title=evidence.answer_title(run.case.title, body, run.ticket),
            body=body,
            evidence=evidence.snapshot(
                case=_case_of(run), ticket=run.ticket, run=_run_of(run), session_id=run.session_id,
                exchange=last.number, source={"kind": "final_answer", "exchange_id": last.pk},
                events=evidence.events_for_answer(answered, answer),
            ),
        )
    ]


def _call_draft(run: Run, call: ToolCall, rows: list[EventRow]) -> _Draft:
    title, body, agent_evidence = evidence.call_arguments(call.arguments)
    return _Draft(
        source_key=f"call:{call.pk}",
        title=title,
        body=body,
        evidence=evidence.snapshot(
            case=_case_of(run), ticket=run.ticket, run=_run_of(run), session_id=run.session_id,
            exchange=call.exchange.number,
            source={"kind": "tool_call", "tool_call_id": call.pk, "call_key": call.call_key,
                    "narrative": call.frame.narrative},
            events=evidence.events_for_call(rows, call_key=call.call_key, narrative=call.frame.narrative),
            agent_evidence=agent_evidence,
        ),
    )


def _rows_by_exchange(exchange_ids: Iterable[int]) -> dict[int, list[EventRow]]:
    rows: dict[int, list[EventRow]] = defaultdict(list)
    ids = set(exchange_ids)
    if not ids:
        return rows
    fetched = (
        SessionEvent.objects.filter(exchange_id__in=ids)
        .order_by("seq")
        .values_list("exchange_id", "seq", "kind", "narrative", "payload")
    )
    for exchange_id, seq, kind, narrative, payload in fetched:
        rows[exchange_id].append(EventRow(seq=seq, kind=kind, narrative=narrative, payload=payload or {}))
    return rows


def _case_of(run: Run) -> dict[str, Any]:
    return {"id": run.case_id, "title": run.case.title}


def _run_of(run: Run) -> dict[str, Any]:
    return {"id": run.pk, "status": run.status, "outcome": run.outcome,
            "launched_by": run.launched_by.get_username()}


# --- disposal ----------------------------------------------------------------------------------


def proposal_accept(
    *, reviewer: Reviewer, proposal_id: int, title: str | None = None, body: str | None = None
) -> Proposal:
    """Accept a pending proposal, optionally with an edited title and body, into knowledge.

    Creates a knowledge entry (slug from the title) or, when the proposal links an entry or its
    title names an existing slug, bumps that entry's version. Every version is kept as a
    ``KnowledgeRevision``. The proposal keeps what the agent proposed; the revision holds what the
    reviewer accepted.

    Raises:
        Forbidden: ``permission_denied`` (not a reviewer), ``four_eyes_required``.
        SkaldError: ``invalid`` (400) for a blank or over-long edited title or body.
        NotFound: ``proposal_not_found``.
        Conflict: ``proposal_already_disposed``.
    """
    _require_reviewer(reviewer)
    title = _edited(title, field="title", limit=evidence.TITLE_MAX)
    body = _edited(body, field="body", limit=BODY_MAX)
    with transaction.atomic(durable=True):
        proposal = _pending_for_update(proposal_id=proposal_id, reviewer=reviewer)
        final_title = proposal.title if title is None else title
        final_body = proposal.body if body is None else body
        now = clock.now()
        entry, created = _entry_versioned(proposal=proposal, title=final_title, body=final_body, now=now)
        KnowledgeRevision.objects.create(entry=entry, version=entry.version, title=final_title, body=final_body,
                                         proposal=proposal, created_by_id=reviewer.pk, created_at=now)
        proposal.status = ProposalStatus.ACCEPTED
        proposal.disposed_by_id = reviewer.pk
        proposal.disposed_at = now
        proposal.knowledge_entry = entry
        proposal.save(update_fields=["status", "disposed_by", "disposed_at", "knowledge_entry"])
        actor = Actor.user(reviewer)
        edited = sorted(name for name, value in (("title", title), ("body", body)) if value is not None)
        audit_append(
            actor=actor, kind=AuditKind.PROPOSAL_ACCEPTED, subject_type="proposal", subject_id=proposal.pk,
            payload={"run": proposal.run_id, "entry": entry.pk, "slug": entry.slug, "version": entry.version,
                     "edited": edited},
        )
        audit_append(
            actor=actor, kind=AuditKind.KNOWLEDGE_VERSIONED, subject_type="knowledge_entry", subject_id=entry.pk,
            payload={"slug": entry.slug, "version": entry.version, "created": created, "proposal": proposal.pk,
                     "title": final_title, "body_sha256": hashlib.sha256(final_body.encode()).hexdigest()},
        )
    return proposal


def proposal_reject(*, reviewer: Reviewer, proposal_id: int, reason: str) -> Proposal:
    """Reject a pending proposal with a reason (required: the rejection must say why).

    Raises:
        Forbidden: ``permission_denied`` (not a reviewer), ``four_eyes_required``.
        SkaldError: ``invalid`` (400) for a blank or over-long reason.
        NotFound: ``proposal_not_found``.
        Conflict: ``proposal_already_disposed``.
    """
    _require_reviewer(reviewer)
    reason = (reason or "").strip()
    if not reason or len(reason) > REASON_MAX:
        raise SkaldError("A rejection needs a reason.", code="invalid", http_status=400,
                         fields={"reason": [f"required, 1 to {REASON_MAX} characters"]})
    with transaction.atomic(durable=True):
        proposal = _pending_for_update(proposal_id=proposal_id, reviewer=reviewer)
        proposal.status = ProposalStatus.REJECTED
        proposal.disposed_by_id = reviewer.pk
        proposal.disposed_at = clock.now()
        proposal.reason = reason
        proposal.save(update_fields=["status", "disposed_by", "disposed_at", "reason"])
        audit_append(
            actor=Actor.user(reviewer), kind=AuditKind.PROPOSAL_REJECTED, subject_type="proposal",
            subject_id=proposal.pk, payload={"run": proposal.run_id, "reason": reason[:500]},
        )
    return proposal


def _require_reviewer(user: Reviewer) -> None:
    if not has_role(user, Role.REVIEWER):
        raise Forbidden("Only reviewers dispose proposals.", code="permission_denied")


def _edited(value: str | None, *, field: str, limit: int) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > limit:
        raise SkaldError(f"An edited {field} must not be blank.", code="invalid", http_status=400,
                         fields={field: [f"1 to {limit} characters"]})
    return value


def _pending_for_update(*, proposal_id: int, reviewer: Reviewer) -> Proposal:
    proposal = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
    if proposal is None:
        raise NotFound("No such proposal.", code="proposal_not_found")
    if proposal.status != ProposalStatus.PENDING:
        raise Conflict("This proposal was already disposed.", code="proposal_already_disposed",
                       status=proposal.status)
    if settings.SKALD_FOUR_EYES and _launcher_id(proposal) == reviewer.pk:
        raise Forbidden("Four eyes: whoever launched the run cannot dispose its proposals.",
                        code="four_eyes_required")
    return proposal


def _launcher_id(proposal: Proposal) -> int | None:
    if proposal.run_id is not None:
        return Run.objects.filter(pk=proposal.run_id).values_list("launched_by_id", flat=True).first()
    # A proposal from a session without a run: its owner stands in for the launcher.
    return Session.objects.filter(pk=proposal.session_id).values_list("owner_id", flat=True).first()


def _entry_versioned(
    *, proposal: Proposal, title: str, body: str, now: Any
) -> tuple[KnowledgeEntry, bool]:
    """The entry after this acceptance (locked) and whether it was created."""
    entry = knowledge_entry_target(proposal=proposal, title=title, for_update=True)
    slug = entry_slug(proposal=proposal, title=title)
    if entry is None:
        try:
            with transaction.atomic():
                created = KnowledgeEntry.objects.create(slug=slug, title=title, body=body, version=1,
                                                        created_at=now, updated_at=now)
            return created, True
        except IntegrityError:
            # A concurrent acceptance created the slug first: this one becomes its next version.
            entry = KnowledgeEntry.objects.select_for_update().get(slug=slug)
    entry.version += 1
    entry.title = title
    entry.body = body
    entry.updated_at = now
    entry.save(update_fields=["version", "title", "body", "updated_at"])
    return entry, False
