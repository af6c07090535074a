"""The database-backed decision: load the scope's rule sets, then ask the pure engine.

Fail-closed: a database error (or anything else) while loading the rules is a deny, never an
exception that a caller might mistake for "no opinion".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from approvals.rules.engine import Decision, check
from approvals.rules.selectors import rule_sets_for
from skald.mcp.facts import tool_facts

logger = logging.getLogger(__name__)


def decide(*, tool: str, args: Mapping[str, Any], user_id: int | None, agent: str | None,
           provenance: Mapping[str, Any] | None = None) -> Decision:
    """Decide one call for the turn's user and agent.

    ``provenance``: the call's provenance from the kernel (loop/provenance.py), as the
    ``$provenance.*`` facts (:func:`provenance_facts`); an untainted call has ``tainted: false``.

    Neither a user nor an agent means no scope: the call is denied (SPEC A1). The rules are read
    in a savepoint, so a failed read leaves a caller's surrounding transaction usable.
    """
    if user_id is None and not agent:
        return check(tool, args, None)
    try:
        with transaction.atomic():
            rule_sets = rule_sets_for(user_id=user_id, agent=agent)
    except Exception as exc:
        logger.exception("approval rules could not be loaded; denying %s", tool)
        return Decision("deny", None, (), f"engine fault: rules unavailable: {type(exc).__name__}: {exc}")
    return check(tool, args, rule_sets, {**tool_facts(tool), "provenance": provenance_facts(provenance)})


PROVENANCE_FLAGS = ("tainted", "argument_from_untrusted", "injection_suspected", "argument_from_suspect", "read_only")


def provenance_facts(provenance: Mapping[str, Any] | None) -> dict[str, str]:
    """``$provenance.tainted``, ``.argument_from_untrusted``, ``.injection_suspected``,
    ``.argument_from_suspect``, ``.read_only``: ``true`` / ``false`` (docs/provenance.md)."""
    found = provenance or {}
    return {name: "true" if found.get(name) else "false" for name in PROVENANCE_FLAGS}


def fired_provenance(decision: Decision) -> list[str]:
    """The provenance conditions of the rules that matched (``tainted=true`` …): what Explain shows."""
    fired: list[str] = []
    for entry in decision.trace:
        if entry.result != "match":
            continue
        for path, glob in entry.rule.arg_matchers.items():
            condition = f"{path.removeprefix('$provenance.')}={glob}"
            if path.startswith("$provenance.") and condition not in fired:
                fired.append(condition)
    return fired
