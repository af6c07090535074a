"""Session reads below the access rule: who may read which session is :mod:`skald.sessions.access`."""

from __future__ import annotations

from django.db.models import Exists, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce

from loop.events import EventKind
from loop.models import Exchange, Session, SessionEvent
from skald.core.errors import NotFound
from skald.models import Run

# PendingApproval.status of an approval nobody has answered yet. The product core imports no feature,
# so it reads the approvals through the reverse relation by name (as skald.sessions.access does).
APPROVAL_PENDING = "pending"


def exchange_get(*, session: Session, exchange_id: int) -> Exchange:
    exchange = Exchange.objects.filter(session=session, pk=exchange_id).first()
    if exchange is None:
        raise NotFound("No such exchange.", code="exchange_not_found")
    return exchange


def events_after(*, session: Session, after: int, limit: int) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session=session, seq__gt=after).order_by("seq")[:limit])


def session_case() -> Coalesce:
    """The case a session's tools read, as an expression over the session row: its run's case, else
    the latest case it was attached to (an audited ``control:note``); None when it has none. The one
    rule: the turn's environment (``skald.loop_adapters.runtime.session_extras``) and the session
    list both read it here."""
    run_case = Run.objects.filter(session_id=OuterRef("pk")).values("case_id")[:1]
    attached_case = (SessionEvent.objects
                     .filter(session_id=OuterRef("pk"), kind=EventKind.NOTE, payload__has_key="attached_case")
                     .order_by("-seq")
                     .values(case=Cast(KeyTextTransform("attached_case", "payload"), IntegerField()))[:1])
    return Coalesce(Subquery(run_case), Subquery(attached_case), output_field=IntegerField())


def sessions_with_facts(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """``sessions``, each with what a list of them shows: ``awaiting_approval`` (a call of it waits for
    an approver) and ``case_id`` (:func:`session_case`)."""
    pending = Session.objects.filter(pk=OuterRef("pk"), approvals__status=APPROVAL_PENDING)
    return sessions.annotate(awaiting_approval=Exists(pending), case_id=session_case())


def session_with_facts(session: Session) -> Session:
    """One session as :func:`sessions_with_facts` shows it."""
    return sessions_with_facts(Session.objects.filter(pk=session.pk)).get()
