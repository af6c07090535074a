"""Who did it: a user, the system, or an agent acting for a user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from audit.models import ActorType


@dataclass(frozen=True, slots=True)
class Actor:
    type: str
    id: str

    @classmethod
    def user(cls, user: Any) -> Actor:
        return cls(ActorType.USER, str(user.pk))

    @classmethod
    def system(cls, name: str = "skald") -> Actor:
        return cls(ActorType.SYSTEM, name)

    @classmethod
    def agent(cls, name: str) -> Actor:
        return cls(ActorType.AGENT, name)

    @classmethod
    def parse(cls, principal: str) -> Actor:
        """``"user:42"``, ``"system:kernel"``, ``"agent:troubleshooter"`` (the kernel's form)."""
        kind, _, ident = principal.partition(":")
        if kind not in ActorType.values or not ident:
            raise ValueError(f"malformed principal {principal!r}")
        return cls(kind, ident)
