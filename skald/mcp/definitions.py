"""Pure helpers over MCP tool definitions: the name a model sees, the pinned digest, the diff.

A definition is what an admin pins when enabling a server (no rug pull): the tool's name,
description, input schema and annotations. Its digest is the SHA-256 of their canonical JSON, so
any change a server makes to one of them, however small, is seen.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "mcp__"
SEPARATOR = "__"
ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
# What a model may be offered as a tool name (the providers' common rule), after the prefix.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Definition:
    """One tool as a server lists it, reduced to what is pinned."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema),
                "annotations": dict(self.annotations)}

    @property
    def digest(self) -> str:
        return definition_digest(self.as_dict())

    @classmethod
    def of(cls, stored: Mapping[str, Any]) -> Definition:
        return cls(name=str(stored.get("name", "")), description=str(stored.get("description") or ""),
                   input_schema=dict(stored.get("input_schema") or {}),
                   annotations=dict(stored.get("annotations") or {}))


def definition_digest(definition: Mapping[str, Any]) -> str:
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def hints(annotations: Mapping[str, Any]) -> dict[str, bool]:
    """The four behaviour hints, only those the server stated, as booleans."""
    return {key: bool(annotations[key]) for key in ANNOTATION_HINTS if key in annotations
            and isinstance(annotations[key], bool)}


def offered_name(server: str, tool: str) -> str:
    """``mcp__{server}__{tool}``: the name a model sees and rules match."""
    return f"{PREFIX}{server}{SEPARATOR}{tool}"


def split_offered(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` from an offered name, or None when it is not an MCP tool's. Server names
    are slugs without a double underscore, so the first ``__`` after the prefix splits them."""
    if not name.startswith(PREFIX):
        return None
    server, sep, tool = name[len(PREFIX):].partition(SEPARATOR)
    if not server or not sep or not tool:
        return None
    return server, tool


def valid_tool_name(name: str) -> bool:
    return bool(_TOOL_NAME.match(name))


def definition_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """A unified diff of two definitions' canonical, indented JSON (what the admin shows)."""
    before = json.dumps(old, sort_keys=True, indent=2, ensure_ascii=False).splitlines()
    after = json.dumps(new, sort_keys=True, indent=2, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(before, after, "pinned", "listed", lineterm=""))
