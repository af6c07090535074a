"""Approvals in the admin (SPEC A2, O3): security groups with their rules, global rules, parked
calls and known tools.

Every write goes through a service: rules and groups through :mod:`approvals.policy_services`
(audited RULE_CHANGED / GROUP_CHANGED), resolutions through ``pending_approval_resolve`` — the
same service the API calls. Parked calls and known tools are never edited here.
"""

from __future__ import annotations

from django.contrib import admin

from approvals import admin_pending, admin_rules  # noqa: F401  (they register their admins)
from approvals.models import KnownTool
from skald.core.admin import ReadOnlyAdmin

# --- known tools -------------------------------------------------------------------------------

@admin.register(KnownTool)
class KnownToolAdmin(ReadOnlyAdmin):
    list_display = ["name", "category", "first_seen", "last_seen", "description"]
    list_filter = ["category"]
    search_fields = ["name", "description"]


# Credential tripwires live in their own module; importing it registers them with this site.
from approvals import admin_tripwires  # noqa: E402, F401
