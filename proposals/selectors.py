"""Reads of proposals and knowledge, written to avoid N+1."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from proposals.evidence import knowledge_slug
from proposals.models import KnowledgeEntry, KnowledgeRevision, Proposal, ProposalStatus
from skald.core.errors import NotFound, SkaldError


def proposals_list(*, status: str | None = None) -> QuerySet[Proposal]:
    """Proposals oldest first (a queue is served in arrival order), optionally of one status.

    Raises:
        SkaldError: ``invalid`` (400) for an unknown status.
    """
    query = Proposal.objects.select_related("run__case", "disposed_by", "knowledge_entry").order_by("id")
    if status:
        if status not in ProposalStatus.values:
            raise SkaldError(f"unknown status {status!r}", code="invalid", http_status=400,
                             fields={"status": [f"must be one of {', '.join(ProposalStatus.values)}"]})
        query = query.filter(status=status)
    return query


def proposal_get(*, proposal_id: int) -> Proposal:
    """One proposal with what its detail page shows.

    Raises:
        NotFound: ``proposal_not_found``.
    """
    proposal = (
        Proposal.objects.select_related("run__case", "run__launched_by", "disposed_by", "knowledge_entry")
        .filter(pk=proposal_id)
        .first()
    )
    if proposal is None:
        raise NotFound("No such proposal.", code="proposal_not_found")
    return proposal


def knowledge_entry_target(*, proposal: Proposal, title: str, for_update: bool = False) -> KnowledgeEntry | None:
    """The entry accepting ``proposal`` with ``title`` would update, or None for a new entry.

    An explicit ``knowledge_entry`` link wins; otherwise the entry whose slug the title names.
    ``for_update`` locks it (the accepting service's read).
    """
    entries = KnowledgeEntry.objects.select_for_update() if for_update else KnowledgeEntry.objects.all()
    if proposal.knowledge_entry_id is not None:
        return entries.filter(pk=proposal.knowledge_entry_id).first()
    return entries.filter(slug=entry_slug(proposal=proposal, title=title)).first()


def entry_slug(*, proposal: Proposal, title: str) -> str:
    """The slug a new entry gets when ``proposal`` is accepted with ``title``."""
    return knowledge_slug(title, fallback=f"proposal-{proposal.pk}")


def proposal_consequence(*, proposal: Proposal) -> dict[str, Any]:
    """What accepting would do, or what accepting did: shown to the reviewer before they act.

    ``{"action", "slug", "entry", "version"}``: ``action`` is ``create`` or ``update`` while
    pending, ``applied`` once accepted, ``none`` once rejected; ``version`` is the entry version
    the acceptance produces (or produced).
    """
    if proposal.status == ProposalStatus.REJECTED:
        return {"action": "none", "slug": None, "entry": None, "version": None}
    if proposal.status == ProposalStatus.ACCEPTED:
        accepted = (
            KnowledgeRevision.objects.filter(proposal=proposal).select_related("entry").order_by("-version").first()
        )
        if accepted is None:  # the entry has since been removed
            return {"action": "none", "slug": None, "entry": None, "version": None}
        return {"action": "applied", "slug": accepted.entry.slug, "entry": accepted.entry_id,
                "version": accepted.version}
    target = knowledge_entry_target(proposal=proposal, title=proposal.title)
    if target is None:
        slug = entry_slug(proposal=proposal, title=proposal.title)
        return {"action": "create", "slug": slug, "entry": None, "version": 1}
    return {"action": "update", "slug": target.slug, "entry": target.pk, "version": target.version + 1}
