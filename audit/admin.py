"""The audit log in the admin: read-only for everyone (superusers too), with verify and record-head.

The admin only parses and delegates: verification and head recording go through
:mod:`audit.services`, so the record-head button is audited like any other write.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime

from audit import admin_present as present
from audit.actors import Actor
from audit.models import AuditEvent, ChainHead
from audit.services import chain_head_export_latest, chain_head_record, chain_verify
from skald.core.admin import ReadOnlyAdmin, admin_may_view, current_viewer


class _Echo:
    """A file-like object whose ``write`` returns the line: csv.writer feeding a stream."""

    def write(self, value: str) -> str:
        return value


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_filter = ("kind", "actor_type", "subject_type")
    search_fields = ("subject_id",)  # the real matching is search_filter: kinds, user names, partial ids
    search_help_text = ("A kind (“approval resolved”), a user name, a subject (“run #1”), a hash's first "
                        "six or more characters, a tool or a partial id.")
    date_hierarchy = "time"
    ordering = ("-seq",)
    show_full_result_count = False  # the log grows without bound; skip the second COUNT(*)
    fields = (
        "seq", "time_seconds", "kind", "actor", "subject_link", "payload_view", "previous_link", "hash",
    )  # fmt: skip

    # Other admin pages link here as ?subject_type=…&subject_id=… or ?actor_type=…&actor_id=….
    _LINKABLE_LOOKUPS = frozenset({"actor_id", "actor_id__exact", "subject_id", "subject_id__exact"})

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        return lookup in self._LINKABLE_LOOKUPS or super().lookup_allowed(lookup, value, request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return present.with_user_names(super().get_queryset(request))

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[AuditEvent], search_term: str
                           ) -> tuple[QuerySet[AuditEvent], bool]:
        if not search_term.strip():
            return queryset, False
        term = search_term.strip()
        return queryset.filter(present.search_filter(term, present.matching_user_ids(term))), False

    list_display = ("seq", "time_seconds", "actor", "summary_line", "subject_link", "short_hash")
    readonly_fields = fields

    def _may_view(self, label: str) -> bool:
        """Whether the viewer the admin renders for may open ``app.model`` (the subject's link)."""
        request = current_viewer()
        if request is None:
            return False
        app_label, model = label.split(".")
        return bool(request.user.has_perm(f"{app_label}.view_{model}")) or admin_may_view(
            request, self.admin_site, apps.get_model(label))

    @admin.display(description="subject", ordering="subject_type")
    def subject_link(self, obj: AuditEvent) -> str:
        url = present.subject_url(obj, self._may_view)
        text = present.subject_text(obj)
        return format_html('<a href="{}">{}</a>', url, text) if url else text

    @admin.display(description="payload")
    def payload_view(self, obj: AuditEvent) -> str:
        return format_html('<pre class="skald-payload">{}</pre>', present.payload_pretty(obj))

    @admin.display(description="previous hash")
    def previous_link(self, obj: AuditEvent) -> str:
        """The row this one chains to (its hash is this row's ``prev_hash``); the genesis has none."""
        previous = AuditEvent.objects.filter(seq=obj.seq - 1, hash=obj.prev_hash).values_list("pk", "seq").first()
        if previous is None:
            return format_html('<code class="skald-hash">{}</code>', obj.prev_hash)
        url = reverse("admin:audit_auditevent_change", args=[previous[0]])
        return format_html('<a href="{}"><code class="skald-hash">{}</code></a> (row {})', url, obj.prev_hash,
                           previous[1])

    @admin.display(description="time", ordering="time")
    def time_seconds(self, obj: AuditEvent) -> str:
        return date_format(localtime(obj.time), "DATETIME_FORMAT")

    @admin.display(description="what happened", ordering="kind")
    def summary_line(self, obj: AuditEvent) -> str:
        return present.summary(obj)

    @admin.display(description="who", ordering="actor_id")
    def actor(self, obj: AuditEvent) -> str:
        return present.actor_text(obj)

    @admin.display(description="hash")
    def short_hash(self, obj: AuditEvent) -> str:
        return obj.hash[:12] + "…"

    def export_view(self, request: HttpRequest, fmt: str) -> StreamingHttpResponse:
        """The rows the changelist shows (its filters and search), as CSV or JSON Lines."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows = self.get_changelist_instance(request).get_queryset(request).order_by("seq").iterator(chunk_size=500)
        if fmt == "csv":
            buffer = _Echo()
            writer = csv.DictWriter(buffer, fieldnames=present.EXPORT_FIELDS)
            lines: Iterator[Any] = itertools.chain(
                [writer.writeheader()], (writer.writerow(present.export_row(r)) for r in rows))
            content_type = "text/csv; charset=utf-8"
        else:
            lines = (json.dumps(present.export_row(r), ensure_ascii=False) + "\n" for r in rows)
            content_type = "application/x-ndjson; charset=utf-8"
        response = StreamingHttpResponse(lines, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="skald-audit.{fmt}"'
        return response

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path("verify/", self.admin_site.admin_view(self.verify_view), name=f"{prefix}_verify"),
            path("export.csv", self.admin_site.admin_view(self.export_view), {"fmt": "csv"},
                 name=f"{prefix}_export_csv"),
            path("export.jsonl", self.admin_site.admin_view(self.export_view), {"fmt": "jsonl"},
                 name=f"{prefix}_export_jsonl"),
            path(
                "record-head/",
                self.admin_site.admin_view(self.record_head_view),
                name=f"{prefix}_record_head",
            ),
        ]
        return own + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        extra = {"can_record_head": request.user.is_superuser, "recorded_head": chain_head_export_latest(),
                 "query_string": request.META.get("QUERY_STRING", ""), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def verify_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Verify audit chain",
            "report": chain_verify(),
            "recorded_head": chain_head_export_latest(),
            "can_record_head": request.user.is_superuser,
        }
        return TemplateResponse(request, "admin/audit/auditevent/verify.html", context)

    def record_head_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.is_superuser:
            raise PermissionDenied
        head = chain_head_record(actor=Actor.user(request.user))
        self.message_user(request, f"Recorded chain head at seq {head.seq}.", messages.SUCCESS)
        return redirect(reverse("admin:audit_auditevent_changelist"))


@admin.register(ChainHead)
class ChainHeadAdmin(ReadOnlyAdmin):
    """Recorded heads pin the chain's tip (seq and hash at a moment, optionally signed): a later verify
    against a head also detects rows cut from the end, which a chain alone cannot show."""

    list_display = ("seq", "hash", "recorded_at", "signed")
    ordering = ("-seq",)

    @admin.display(boolean=True, description="signed")
    def signed(self, obj: ChainHead) -> bool:
        return bool(obj.signature)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # Heads are part of the audit trail: whoever may read the log may read them.
        return request.user.has_perm("audit.view_auditevent") or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

