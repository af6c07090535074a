"""The MCP pages (issue 29), superusers only: servers with their status and last error, their tools
with annotations and pinned digests, quarantined tools with a diff of the pinned and the listed
definition (approve / keep quarantined, both audited), and the calls made through each server.

Every write goes through :mod:`skald.mcp.services`: the form validates with the service's own
rules, ``save_model`` and the actions call the services.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from audit.actors import Actor
from loop.models import ToolCall
from skald.core.errors import SkaldError
from skald.mcp.definitions import PREFIX, SEPARATOR, definition_diff, offered_name
from skald.mcp.models import McpServer, McpTool, McpToolStatus
from skald.mcp.services import (
    SERVER_INPUT,
    mcp_server_create,
    mcp_server_delete,
    mcp_server_refresh,
    mcp_server_update,
    mcp_tool_approve,
    mcp_tool_keep_quarantined,
    server_input_validate,
)


class _SuperusersOnly:
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)


class McpServerForm(forms.ModelForm):
    class Meta:
        model = McpServer
        fields = list(SERVER_INPUT)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        data = {key: cleaned[key] for key in SERVER_INPUT if key in cleaned}
        try:
            server_input_validate(data, current=self.instance if self.instance.pk else None)
        except SkaldError as exc:
            field = exc.extra.get("field")
            self.add_error(field if field in self.fields else None, f"{exc.message} ({exc.code})")
        return cleaned


class McpToolInline(admin.TabularInline):
    model = McpTool
    extra = 0
    can_delete = False
    fields = ["name", "status", "annotations", "digest"]
    readonly_fields = ["name", "status", "annotations", "digest"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(McpServer)
class McpServerAdmin(_SuperusersOnly, admin.ModelAdmin):
    form = McpServerForm
    list_display = ["name", "transport", "trust", "enabled", "allow_sampling", "status", "last_error", "checked_at"]
    list_filter = ["transport", "trust", "enabled", "status"]
    readonly_fields = ["status", "last_error", "checked_at", "recent_calls"]
    inlines = [McpToolInline]
    actions = ["refresh_listing"]

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        data = {key: form.cleaned_data[key] for key in SERVER_INPUT if key in form.cleaned_data}
        actor = Actor.user(request.user)
        try:
            if change:
                current = McpServer.objects.get(pk=obj.pk)
                saved = mcp_server_update(actor=actor, server=current, data=data)
            else:
                saved = mcp_server_create(actor=actor, data=data)
        except SkaldError as exc:
            messages.error(request, f"{exc.code}: {exc.message}")
            saved = McpServer.objects.filter(name=data.get("name")).first() or obj
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        mcp_server_delete(actor=Actor.user(request.user), server=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            mcp_server_delete(actor=Actor.user(request.user), server=server)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        for formset in formsets:  # the tools are the services' (read-only here): nothing is saved
            formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

    @admin.action(description="List the tools now (a differing definition is quarantined)")
    def refresh_listing(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            try:
                changes = mcp_server_refresh(server=server, actor=Actor.user(request.user))
            except SkaldError as exc:
                messages.error(request, f"{server.name}: {exc.message}")
                continue
            messages.info(request, f"{server.name}: {json.dumps(changes)}")

    @admin.display(description="Recent calls through this server")
    def recent_calls(self, obj: McpServer) -> str:
        if obj.pk is None:
            return "-"
        calls = (ToolCall.objects.filter(tool__startswith=f"{PREFIX}{obj.name}{SEPARATOR}")
                 .order_by("-id").values_list("id", "tool", "status", "updated_at")[:20])
        if not calls:
            return "none yet"
        return format_html("<ul>{}</ul>", format_html_join(
            "", "<li>#{} {} — {} ({})</li>", ((pk, tool, status, at) for pk, tool, status, at in calls)))


@admin.register(McpTool)
class McpToolAdmin(_SuperusersOnly, admin.ModelAdmin):
    list_display = ["offered", "server", "status", "digest", "changed_at"]
    list_filter = ["status", "server"]
    search_fields = ["name", "server__name"]
    fields = ["server", "name", "status", "description", "input_schema", "annotations", "digest", "pinned_at",
              "pending_digest", "definition_diff"]
    readonly_fields = ["server", "name", "status", "description", "input_schema", "annotations", "digest",
                       "pinned_at", "pending_digest", "definition_diff"]
    actions = ["approve_definition", "keep_quarantined"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpTool]:
        return super().get_queryset(request).select_related("server")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="offered as")
    def offered(self, obj: McpTool) -> str:
        return offered_name(obj.server.name, obj.name)

    @admin.display(description="pinned → listed")
    def definition_diff(self, obj: McpTool) -> str:
        if not obj.pending:
            return "-"
        pinned = {"name": obj.name, "description": obj.description, "input_schema": obj.input_schema,
                  "annotations": obj.annotations}
        return format_html("<pre>{}</pre>", definition_diff(pinned, obj.pending))

    @admin.action(description="Approve the listed definition (pin it)")
    def approve_definition(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        approved = []
        for tool in queryset.filter(status=McpToolStatus.QUARANTINED).select_related("server"):
            try:
                mcp_tool_approve(actor=Actor.user(request.user), tool=tool, digest=tool.pending_digest)
                approved.append(str(tool))
            except SkaldError as exc:
                messages.error(request, f"{tool}: {exc.message}")
        if approved:
            messages.success(request, f"Approved the listed definition of {', '.join(approved)}: offered to "
                                      "models again.")

    @admin.action(description="Keep quarantined")
    def keep_quarantined(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        kept = []
        for tool in queryset.filter(status=McpToolStatus.QUARANTINED).select_related("server"):
            mcp_tool_keep_quarantined(actor=Actor.user(request.user), tool=tool)
            kept.append(str(tool))
        if kept:
            messages.info(request, f"Kept {', '.join(kept)} quarantined: not offered to models.")
