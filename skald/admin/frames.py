"""A run's frame tree in the admin (SPEC S1, O3): parent call → child frame → its calls, nested.

Read-only; it renders the kernel's Frame and ToolCall rows of one session in two queries.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from loop.models import Frame, ToolCall
from skald.admin.runs import RunAdmin
from skald.models import Run


def frame_tree_html(session_id: int) -> SafeString:
    """Every exchange's root frame with its calls; a delegate call shows the child frame it opened
    (agent, depth, outcome, the model its selection chose) and that frame's calls, recursively."""
    frames = list(Frame.objects.filter(session_id=session_id).order_by("id"))
    calls = list(ToolCall.objects.filter(session_id=session_id).order_by("id")
                 .only("id", "frame_id", "call_key", "tool", "status"))
    by_frame: dict[int, list[ToolCall]] = defaultdict(list)
    for call in calls:
        by_frame[call.frame_id].append(call)
    children: dict[int, list[Frame]] = defaultdict(list)
    for frame in frames:
        if frame.parent_call_id is not None:
            children[frame.parent_call_id].append(frame)

    def render(frame: Frame) -> SafeString:
        model = frame.selection.get("model") if frame.selection else ""
        chosen = format_html(" · model {} ({})", model, frame.selection.get("rule")) if model else ""
        items = []
        for call in by_frame[frame.pk]:
            nested = format_html_join("", "{}", ((render(child),) for child in children[call.pk]))
            items.append(format_html('<li class="call"><code>{}</code> {} <em>{}</em>{}</li>',
                                     call.call_key, call.tool, call.status, nested))
        return format_html('<ul class="frame-tree"><li class="frame depth-{}"><strong>{}</strong> depth {} · {}{}'
                           "<ul>{}</ul></li></ul>", frame.depth, frame.agent, frame.depth,
                           frame.outcome or frame.status, chosen, mark_safe("".join(items)))  # noqa: S308

    roots = [frame for frame in frames if frame.depth == 0]
    if not roots:
        return mark_safe("(no frames yet)")
    return format_html_join("", "{}", ((render(root),) for root in roots))


class RunWithFramesAdmin(RunAdmin):
    """The run page plus its frame tree (kept apart from :mod:`skald.admin.runs`): the tree is part of
    the live fragment, so it follows the same feed as the timeline."""

    def run_context(self, request: HttpRequest, run: Run) -> dict[str, Any]:
        return {**super().run_context(request, run), "frame_tree": frame_tree_html(run.session_id)}
