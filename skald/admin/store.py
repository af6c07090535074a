"""Read-only admin views of the kernel's store: rows change only through the kernel.

They live in the composition layer, not in `loop/`: the kernel knows nothing of how Skald shows it."""

from __future__ import annotations

from django.contrib import admin

from loop.models import Exchange, Frame, Session, SessionEvent, ToolCall
from skald.core.admin import ReadOnlyAdmin

EVENT_FIELDS = ("seq", "kind", "narrative", "payload", "created_at")


class EventInline(admin.TabularInline):
    model = SessionEvent
    fields = EVENT_FIELDS
    readonly_fields = EVENT_FIELDS
    extra = 0
    can_delete = False
    ordering = ["seq"]
    max_num = 0
    show_change_link = False


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["id", "agent", "owner", "source", "title", "last_seq", "exchange_count", "created_at"]
    list_filter = ["agent", "source"]
    search_fields = ["title"]
    inlines = [EventInline]


@admin.register(Exchange)
class ExchangeAdmin(ReadOnlyAdmin):
    list_display = ["id", "session", "number", "status", "outcome", "turns", "input_tokens", "output_tokens",
                    "created_at"]
    list_filter = ["status", "outcome"]


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "session", "call_key", "tool", "status", "is_error", "updated_at"]
    list_filter = ["status", "tool"]


@admin.register(SessionEvent)
class SessionEventAdmin(ReadOnlyAdmin):
    list_display = ["session", "seq", "kind", "narrative", "created_at"]
    list_filter = ["kind"]


@admin.register(Frame)
class FrameAdmin(ReadOnlyAdmin):
    list_display = ["id", "session", "exchange", "depth", "agent", "status", "outcome"]
