"""MCP elicitations (issue 29), superusers only: every card a server asked for during a call, with
its status, and an answer form for a pending one (accept with content, decline, cancel).

The answer goes through :func:`skald.mcp.elicitation.mcp_elicitation_answer`, the service the API
calls: the same schema check, the same audit row, the same wake-up of the waiting call.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html

from skald.admin.mcp import _SuperusersOnly
from skald.core.errors import SkaldError
from skald.mcp.elicitation import ACTIONS, mcp_elicitation_answer
from skald.mcp.models import McpElicitation, McpElicitationStatus


class ElicitationAnswerForm(forms.ModelForm):
    action = forms.ChoiceField(choices=[("", "—")] + [(a, a) for a in ACTIONS], required=False,
                               help_text="Answer a pending card.")
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), required=False,
                              help_text="accept: the answer as a JSON object, valid against the requested schema.")

    class Meta:
        model = McpElicitation
        fields: list[str] = []

    def clean_content(self) -> Any:
        text = self.cleaned_data.get("content") or ""
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None


@admin.register(McpElicitation)
class McpElicitationAdmin(_SuperusersOnly, admin.ModelAdmin):
    form = ElicitationAnswerForm
    list_display = ["id", "server", "tool", "session", "status", "created_at", "expires_at", "answered_by"]
    list_filter = ["status", "server"]
    search_fields = ["server", "tool", "message"]
    readonly_fields = ["server", "tool", "session", "exchange_id", "tool_call_id", "message", "schema", "status",
                       "answer", "answered_by", "created_at", "expires_at", "answered_at"]

    def get_fields(self, request: HttpRequest, obj: McpElicitation | None = None) -> Any:
        fields = list(self.readonly_fields)
        if obj is not None and obj.status == McpElicitationStatus.PENDING:
            fields += ["action", "content"]
        return fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="requested schema")
    def schema(self, obj: McpElicitation) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.requested_schema, indent=2, sort_keys=True))

    def save_model(self, request: HttpRequest, obj: McpElicitation, form: Any, change: bool) -> None:
        action = form.cleaned_data.get("action")
        if not action:
            return
        try:
            mcp_elicitation_answer(user=request.user, elicitation_id=obj.pk, action=action,
                                   content=form.cleaned_data.get("content"))
        except SkaldError as exc:
            messages.error(request, f"{exc.code}: {exc.message}")
            request.mcp_refused = True  # type: ignore[attr-defined]  # response_change: back to the form

    def response_change(self, request: HttpRequest, obj: McpElicitation) -> HttpResponse:
        """A refused answer returns to the card's form (no "changed successfully")."""
        if getattr(request, "mcp_refused", False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Nothing else is written here (the service wrote the answer)."""
