"""Live admin pages: "topic T changed" announced to the pages that show T, once the change commits.

Every state change writes its audit row inside its own transaction (the write path), so
``audit.services.audit_append`` announces the topic of each row it writes (``audit.kinds.live_topic``)
and no service can forget to. A notice carries only the topic and the kind's label: a page that
hears one re-reads what it shows, through the same permission checks as a reload. It travels on the
channel layer, which crosses processes in both profiles (the embedded profile's datagram layer,
Redis in production), so a call a worker parks reaches an approver's open queue at once.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from django.db import transaction

from skald.core.group_send import group_send_soon
from skald.core.roles import GOVERNANCE_ROLES, has_role

# Each topic and the permission a viewer needs to hear it (the pages that show it require the same;
# runs and cases are every governance role's context, so their topic is too). "sessions" needs none:
# its notice says only that some session was created, and the console that hears it re-reads the
# list the viewer may see (``GET /api/sessions/``, under the access model).
LIVE_TOPICS: dict[str, str] = {
    "approvals": "approvals.view_pendingapproval",
    "runs": "skald.view_run",
    "proposals": "proposals.view_proposal",
    "audit": "audit.view_auditevent",
    "sessions": "",
}


def live_topic_allowed(user: Any, topic: str) -> bool:
    """Whether ``user`` may follow ``topic`` (an unknown topic: no)."""
    if topic not in LIVE_TOPICS:
        return False
    if not LIVE_TOPICS[topic]:
        return True
    return bool(user.has_perm(LIVE_TOPICS[topic])) or (topic == "runs" and has_role(user, *GOVERNANCE_ROLES))
MESSAGE_TYPE = "live.changed"  # the consumer's handler: ``live_changed``


def live_group(topic: str) -> str:
    return f"live.{topic}"


class _Announcement:
    """One topic's notice, registered with ``transaction.on_commit``."""

    __slots__ = ("__weakref__", "kind", "topic")

    def __init__(self, topic: str, kind: str) -> None:
        self.topic, self.kind = topic, kind

    def __call__(self) -> None:
        group_send_soon(live_group(self.topic), {"type": MESSAGE_TYPE, "topic": self.topic, "kind": self.kind})


# The notices this thread registered, per database alias and topic, held weakly: Django's list of
# on-commit callbacks holds the only strong reference, so a notice is alive exactly while it is
# still due (Django drops it when it runs, or with a rolled-back transaction or savepoint). No
# reading of Django's private callback list.
_registered = threading.local()


def _pending(alias: str, topic: str) -> bool:
    slots: dict[tuple[str, str], weakref.ref[_Announcement]] = getattr(_registered, "slots", {})
    ref = slots.get((alias, topic))
    return ref is not None and ref() is not None


def _remember(alias: str, announcement: _Announcement) -> None:
    if not hasattr(_registered, "slots"):
        _registered.slots = {}
    _registered.slots[(alias, announcement.topic)] = weakref.ref(announcement)


def live_announce_on_commit(topic: str, *, kind: str) -> None:
    """Tell the pages showing ``topic`` that it changed, once the caller's transaction commits
    (at once in autocommit). ``kind`` names what happened, for the page's own log. The first change
    of a topic in a transaction schedules the notice; later ones find it still due and add none."""
    if topic not in LIVE_TOPICS:
        raise ValueError(f"unknown live topic {topic!r}")
    alias = transaction.get_connection().alias
    if _pending(alias, topic):
        return
    announcement = _Announcement(topic, kind)
    # Robust: a notice that cannot be sent is logged, never raised into the service that committed.
    transaction.on_commit(announcement, robust=True)
    if transaction.get_connection().in_atomic_block:  # in autocommit it has already been sent
        _remember(alias, announcement)
