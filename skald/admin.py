"""The operator's home (SPEC O3). Admin actions call services; they never write governed rows
directly."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.actors import Actor
from skald import admin_store  # noqa: F401  (registers the kernel store's read-only views)
from skald.admin_runs import RunAdmin, launch_gdl_run
from skald.agents.services import agent_save
from skald.cases.services import case_save
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
    list_filter = ["status"]
    search_fields = ["title", "description"]
    inlines = [CaseLogInline]
    exclude = ["created_by", "created_at"]
    actions = [launch_gdl_run]

    def save_model(self, request: HttpRequest, obj: Case, form: Any, change: bool) -> None:
        case_save(actor=Actor.user(request.user), case=obj, created_by_id=request.user.pk,
                  changed=list(form.changed_data))


admin.site.register(Run, RunAdmin)
