"""The catalogue's pages: agents, cases (with the launch of a GDL run) and runs (SPEC O3, W2).
Admin actions call services; they never write governed rows directly."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from audit.actors import Actor
from skald.admin.frames import RunWithFramesAdmin
from skald.admin.runs import READERS, launch_gdl_run, launch_view, may_launch
from skald.agents.services import agent_save
from skald.cases.services import case_save
from skald.core.roles import has_role
from skald.models import Agent, Case, CaseLog, Run


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "client", "strength", "enabled"]
    list_filter = ["kind", "enabled"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "description", "enabled"]}),
        ("Model", {"fields": ["system_prompt", "client", "strength"]}),
        ("Capabilities", {"fields": ["allowed_tools", "bounds", "playbook"]}),
    ]

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        agent_save(actor=Actor.user(request.user), agent=obj, changed=list(form.changed_data))


class CaseLogInline(admin.StackedInline):
    model = CaseLog
    extra = 0


@admin.register(Case)
class CaseAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "status", "created_at"]
    list_display_links = ["id", "title"]
    list_filter = ["status"]
    search_fields = ["title", "description"]
    inlines = [CaseLogInline]
    exclude = ["created_by", "created_at"]
    actions = [launch_gdl_run]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The case is the context of every run, approval and proposal.
        return has_role(request.user, *READERS) or super().has_view_permission(request, obj)

    def get_urls(self) -> list[URLPattern]:
        launch = path("<int:case_id>/launch/", self.admin_site.admin_view(self.launch), name="skald_case_launch")
        return [launch, *super().get_urls()]

    def launch(self, request: HttpRequest, case_id: int) -> HttpResponse:
        return launch_view(self, request, case_id)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        runs = Run.objects.filter(case_id=object_id if str(object_id).isdigit() else 0) \
            .select_related("launched_by").order_by("-id")[:50]
        extra = {"runs": list(runs), "can_launch": may_launch(request), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def save_model(self, request: HttpRequest, obj: Case, form: Any, change: bool) -> None:
        case_save(actor=Actor.user(request.user), case=obj, created_by_id=request.user.pk,
                  changed=list(form.changed_data))


admin.site.register(Run, RunWithFramesAdmin)
