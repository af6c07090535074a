"""Export: the live configuration as the canonical document text, with its digest."""

from __future__ import annotations

from approvals.policy_doc.document import digest, render
from approvals.policy_doc.live import policy_live


def policy_export() -> tuple[str, str]:
    """(the YAML text, its digest) of the live configuration."""
    doc = policy_live()
    return render(doc), digest(doc)
