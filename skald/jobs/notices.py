"""The owner's Notices conversation: where a cron job that notifies its owner posts its runs' results
(issue 27 §7: a cron job's home is a conversation the creator chose, or "notify the owner"). One per
owner, made on first use, listed in the console like any conversation; its agent is the default
chat agent, so the owner can ask about a result where it arrived."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from loop.models import Session
from skald.loop_adapters.store import kernel_store
from skald.sessions.defaults import DEFAULT_AGENT

NOTICES_SOURCE = "notices"
NOTICES_TITLE = "Notices: scheduled job results"


def owner_notices_session(*, owner_id: int) -> Session:
    """The owner's Notices conversation, made on first use (the owner's row lock keeps it to one)."""
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=owner_id).values_list("pk", flat=True).first()
        existing = Session.objects.filter(owner_id=owner_id, source=NOTICES_SOURCE).order_by("pk").first()
        if existing is not None:
            return existing
        return kernel_store().create_session(owner_id=owner_id, agent=DEFAULT_AGENT, source=NOTICES_SOURCE,
                                             title=NOTICES_TITLE, principal=f"user:{owner_id}")
