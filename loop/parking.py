"""What parks when a call needs a human (SPEC A3, S1): the waiting call, the callback that writes
its durable approval, and the question for the human.

A park entry is made where the need arises (the gate's ``require``, a tool's handoff, a child
frame's waiting call travelling up through its delegate) and written by
:meth:`loop.store_exchanges.ExchangeLog.park`, all of a tree's entries in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from loop.models import ToolCall

# Writes the call's durable approval (in the park's transaction); returns what its
# ``approval_requested`` row carries besides the call.
Parker = Callable[[], Mapping[str, object]]


class ParkEntry(NamedTuple):
    """One call waiting for a human."""

    call: ToolCall
    park: Parker
    question: str  # a handoff's question; "" for a gate's ``require``
