"""The audit log in the admin: read-only for everyone (superusers too), with verify and record-head.

The admin only parses and delegates: verification and head recording go through
:mod:`audit.services`, so the record-head button is audited like any other write.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent, ChainHead
from audit.services import chain_head_export_latest, chain_head_record, chain_verify
from skald.core.admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("seq", "time", "kind_label", "actor", "subject", "short_hash")
    list_filter = ("kind", "actor_type", "subject_type")
    # "=" keeps the search on the ids exact (and index-friendly) rather than a LIKE over the log.
    search_fields = ("=actor_id", "=subject_id")
    date_hierarchy = "time"
    ordering = ("-seq",)
    show_full_result_count = False  # the log grows without bound; skip the second COUNT(*)
    fields = (
        "seq", "time", "kind", "actor_type", "actor_id", "subject_type", "subject_id", "payload",
        "prev_hash", "hash",
    )  # fmt: skip

    # Other admin pages link here as ?subject_type=…&subject_id=… or ?actor_type=…&actor_id=….
    _LINKABLE_LOOKUPS = frozenset({"actor_id", "actor_id__exact", "subject_id", "subject_id__exact"})

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        return lookup in self._LINKABLE_LOOKUPS or super().lookup_allowed(lookup, value, request)

    @admin.display(description="kind", ordering="kind")
    def kind_label(self, obj: AuditEvent) -> str:
        # A tampered row may carry a kind outside the enumeration; the log must still render it.
        return AuditKind(obj.kind).label if obj.kind in AuditKind.values else f"unknown kind {obj.kind}"

    @admin.display(description="actor")
    def actor(self, obj: AuditEvent) -> str:
        return f"{obj.actor_type}:{obj.actor_id}"

    @admin.display(description="subject")
    def subject(self, obj: AuditEvent) -> str:
        return f"{obj.subject_type}:{obj.subject_id}"

    @admin.display(description="hash")
    def short_hash(self, obj: AuditEvent) -> str:
        return obj.hash[:12] + "…"

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path("verify/", self.admin_site.admin_view(self.verify_view), name=f"{prefix}_verify"),
            path(
                "record-head/",
                self.admin_site.admin_view(self.record_head_view),
                name=f"{prefix}_record_head",
            ),
        ]
        return own + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        extra = {"can_record_head": request.user.is_superuser, **(extra_context or {})}
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

