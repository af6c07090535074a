"""What the approval decision page and "test a call" show: the context of a parked call (case, run,
ticket, agent, requester), the rule that required approval, the engine's explain trace, the diff,
and which item comes next. Reads only; the decision itself goes through the service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from approvals.models import ApprovalRule, ApprovalStatus, PendingApproval
from approvals.pending.provenance import provenance_view
from approvals.rules.engine import Decision
from approvals.rules.policy import decide
from loop.models import SessionEvent
from skald.core.admin import admin_may_view
from skald.core.text import clip_to_line
from skald.models import Case, Run

# The argument that says what a call touches, in the order looked for: a file's path, a command's
# argv, an MCP server, an address, a question or a task for a sub-agent.
KEY_ARGUMENTS = ("path", "argv", "command", "server", "url", "query", "question", "agent", "task")
KEY_ARGUMENT_CHARS = 80

RESULT_WORDS = {"match": "matches", "no_match": "does not match", "skipped": "skipped (disabled)"}


def diff_html(preview: str) -> str:
    """A unified diff in a ``<pre>``, one block line per diff line, added green and removed red (escaped)."""
    if not preview:
        return format_html('<p class="help">{}</p>', "No preview for this call.")

    def css(line: str) -> str:
        if line.startswith(("+++", "---")):
            return "diff-file"
        if line.startswith("@@"):
            return "diff-hunk"
        return {"+": "diff-add", "-": "diff-del"}.get(line[:1], "diff-ctx")

    # Spans are display:block, so no newline between them: a "\n" would add a blank line each.
    lines = format_html_join("", '<span class="{}">{}</span>',
                             ((css(line), line or " ") for line in preview.splitlines()))
    return format_html('<pre class="skald-diff">{}</pre>', lines)


def rule_sentence(snapshot: Mapping[str, Any]) -> str:
    """``#12 require 'write_file' @100 (global)`` from a rule or its snapshot."""
    if not snapshot:
        return "—"
    group = snapshot.get("group")
    name = group.get("name") if isinstance(group, Mapping) else group
    scope = f"group {name}" if name else "global"
    return f"#{snapshot.get('id')} {snapshot.get('action')} {snapshot.get('tool_pattern')!r} " \
           f"@{snapshot.get('priority')} ({scope})"


@dataclass
class TraceRow:
    rule_set: str
    rule: str
    result: str
    css: str
    detail: str
    url: str


def trace_rows(decision: Decision, *, rules_open: bool) -> list[TraceRow]:
    rows = []
    for entry in decision.trace:
        rule = entry.rule
        css = "chosen" if entry.chosen else entry.result
        result = RESULT_WORDS.get(entry.result, entry.result) + (" — decides its set" if entry.chosen else "")
        url = reverse("admin:approvals_approvalrule_change", args=[rule.id]) if rules_open and rule.id else ""
        rows.append(TraceRow(entry.rule_set, rule_sentence(rule.as_dict()), result, css, entry.detail, url))
    return rows


def decision_context(request: HttpRequest, site: admin.AdminSite, approval: PendingApproval) -> dict[str, Any]:
    run: Run | None = Run.objects.filter(session_id=approval.session_id).select_related("case").first()
    decision = decide(tool=approval.tool, args=approval.args, user_id=approval.requested_by_id,
                      agent=approval.session.agent, provenance=approval.provenance or None)
    rules_open = admin_may_view(request, site, ApprovalRule)
    members = list(PendingApproval.objects.filter(session_id=approval.session_id, batch=approval.batch)
                   .select_related("resolved_by").order_by("tool_call_id"))
    return {
        "run": run,
        "case": run.case if run else None,
        "run_url": reverse("admin:skald_run_change", args=[run.pk])
        if run and admin_may_view(request, site, Run) else "",
        "case_url": reverse("admin:skald_case_change", args=[run.case_id])
        if run and admin_may_view(request, site, Case) else "",
        "agent": approval.session.agent,
        "requester": approval.requested_by.get_username() if approval.requested_by else "—",
        "rule_text": rule_sentence(approval.rule_snapshot or {}),
        "rule_note": approval.rule.note if approval.rule is not None else "",
        "rule_url": reverse("admin:approvals_approvalrule_change", args=[approval.rule_id])
        if approval.rule_id and rules_open else "",
        "decision": decision,
        "trace": trace_rows(decision, rules_open=rules_open),
        "diff": diff_html(approval.preview),
        "arguments": json.dumps(approval.args, indent=2, sort_keys=True, ensure_ascii=False),
        "batch_members": members if len(members) > 1 else [],
        "provenance": provenance_view(approval, events_open=admin_may_view(request, site, SessionEvent)),
    }


def key_argument(args: Mapping[str, Any] | None) -> str:
    """The one argument a person needs to tell calls apart in a queue, clipped to one short line."""
    for name in KEY_ARGUMENTS:
        value = (args or {}).get(name)
        if value in (None, "", []):
            continue
        return clip_to_line(" ".join(map(str, value)) if isinstance(value, list) else value, KEY_ARGUMENT_CHARS)
    return ""


def next_pending(*, after: PendingApproval) -> PendingApproval | None:
    """The queue's head other than ``after``: the same batch first, then the oldest waiting."""
    pending = PendingApproval.objects.filter(status=ApprovalStatus.PENDING).exclude(pk=after.pk)
    same_batch = pending.filter(session_id=after.session_id, batch=after.batch).order_by("tool_call_id").first()
    return same_batch or pending.order_by("created_at", "tool_call_id").first()
