"""What the rule engine may know about a tool beyond its name and arguments (``$`` matcher paths).

For ``mcp__{server}__{tool}``: ``$mcp.server``, ``$mcp.trust`` (``trusted`` / ``untrusted``) and
the hints the server stated (``$mcp.readOnlyHint`` … as ``true`` / ``false``), from the pinned
definition in the database, never from the model. Other tools have no facts.
"""

from __future__ import annotations

from typing import Any

from skald.mcp import tools_cache
from skald.mcp.definitions import hints, split_offered


def tool_facts(tool: str) -> dict[str, Any]:
    parts = split_offered(tool)
    if parts is None:
        return {}
    server, name = parts
    for offer in tools_cache.offers():
        if offer.server == server and offer.tool == name:
            return {"mcp": {"server": server, "trust": "trusted" if offer.trusted else "untrusted",
                            **hints(offer.annotations)}}
    return {"mcp": {"server": server}}
