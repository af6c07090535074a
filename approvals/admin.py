"""Approvals in the admin (SPEC A2, O3): security groups with their rules, global rules, parked
calls and known tools.

Every write goes through a service: rules and groups through :mod:`approvals.rules.services`
(audited RULE_CHANGED / GROUP_CHANGED), resolutions through ``pending_approval_resolve`` — the
same service the API calls. Parked calls and known tools are never edited here.
"""

from __future__ import annotations

from django.contrib import admin

from approvals.models import KnownTool
from approvals.pending import admin as pending_admin  # noqa: F401  (each registers its pages)
from approvals.rules import admin as rules_admin  # noqa: F401
from approvals.tripwires import admin as tripwires_admin  # noqa: F401
from skald.core.admin import ReadOnlyAdmin

# --- known tools -------------------------------------------------------------------------------

@admin.register(KnownTool)
class KnownToolAdmin(ReadOnlyAdmin):
    list_display = ["name", "category", "first_seen", "last_seen", "description"]
    list_filter = ["category"]
    search_fields = ["name", "description"]

