"""A small governance configuration written through the admin's services, for the policy document tests."""

from __future__ import annotations

import sys
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings

from approvals.models import ApprovalRule, SecurityGroup, TripwireAllowEntry, TripwirePattern
from approvals.rules.seed import default_rules_ensure
from approvals.rules.services import approval_rule_save, security_group_save
from approvals.tripwires.services import tripwire_allow_save, tripwire_pattern_save
from audit.actors import Actor
from skald.agents.seed import seed_agents
from skald.mcp.services import mcp_server_create
from skald.models import Agent
from skald.notifications.services import subscription_create

ADMIN = Actor.system("test")


def configure(alice: User) -> SecurityGroup:
    """The default rules, an 'ops' group (alice, the troubleshooter) with two rules, a pattern, an allow
    entry, a disabled stdio MCP server (the demo's, for the troubleshooter), and an organisation
    e-mail subscription to pending and expired approvals."""
    seed_agents()
    default_rules_ensure()
    group = security_group_save(actor=ADMIN, group=SecurityGroup(name="ops", description="On-call operators"),
                                changed=["created"], users=[alice],
                                agents=[Agent.objects.get(name="troubleshooter")])
    approval_rule_save(actor=ADMIN, rule=ApprovalRule(group=group, tool_pattern="execute_cmd", action="deny",
                                                      priority=50, note="ops never run commands"), changed=["created"])
    approval_rule_save(actor=ADMIN, rule=ApprovalRule(group=group, tool_pattern="write_file",
                                                      arg_matchers={"path": "reports/*"}, action="require",
                                                      priority=10, approval_ttl=timedelta(hours=2)),
                       changed=["created"])
    tripwire_pattern_save(actor=ADMIN, pattern=TripwirePattern(name="acme-key", regex=r"ACME-[0-9A-F]{16}",
                                                               keywords="acme-"), changed=["created"])
    tripwire_allow_save(actor=ADMIN, entry=TripwireAllowEntry(regex=r"ACME-0{16}", reason="the documented example key"),
                        changed=["created"])
    with override_settings(SKALD_MCP_STDIO_ALLOWLIST=(sys.executable,)):
        mcp_server_create(actor=ADMIN, data={
            "name": "demo", "transport": "stdio", "argv": [sys.executable, DEMO_MCP_SCRIPT],
            "secret_env": {"DEMO_TOKEN": "/run/secrets/demo-token"}, "agents": ["troubleshooter"]})
    subscription_create(actor=ADMIN, owner=None, data={
        "name": "on-call", "channel": "email", "target": "oncall@example.org",
        "events": ["approval.pending", "approval.expired"], "chain_order": 1})
    return group


DEMO_MCP_SCRIPT = str(settings.BASE_DIR / "demo" / "mcp_server.py")
