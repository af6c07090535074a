"""Read-only admin views of the kernel's store: rows change only through the kernel.

They live in the composition layer, not in `loop/`: the kernel knows nothing of how Skald shows it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from loop.events import EventKind
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


def kind_label(kind: str) -> str:
    """``control:compaction_probe`` → ``compaction probe``: a kind as people name it."""
    return kind.removeprefix("control:").replace("_", " ")


class KindFilter(admin.SimpleListFilter):
    """Events by kind in words (compaction, compaction probe, tool result …): the kinds the kernel
    writes, from its enum (a DISTINCT over the whole event log on every page load would scan it)."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return sorted(((kind.value, kind_label(kind.value)) for kind in EventKind), key=lambda pair: pair[1])

    def queryset(self, request: HttpRequest, queryset: QuerySet[SessionEvent]) -> QuerySet[SessionEvent]:
        return queryset.filter(kind=self.value()) if self.value() else queryset


@admin.register(SessionEvent)
class SessionEventAdmin(ReadOnlyAdmin):
    list_display = ["session", "seq", "kind_words", "narrative", "created_at"]
    list_filter = [KindFilter]
    list_select_related = ["session"]
    ordering = ["session", "seq"]

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # The run and session pages link here as ?session=<id>[&kind=…].
        return lookup == "session" or super().lookup_allowed(lookup, value, request)

    @admin.display(description="kind", ordering="kind")
    def kind_words(self, event: SessionEvent) -> str:
        return kind_label(event.kind)


@admin.register(Frame)
class FrameAdmin(ReadOnlyAdmin):
    list_display = ["id", "session", "exchange", "depth", "agent", "status", "outcome"]
