"""Idempotent demo seeding for the embedded profile: users with roles, a demo case, the agents."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Group, User
from django.db import transaction

from approvals.rules.seed import demo_rules_ensure
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.identity.users import user_roles_set
from skald.models import Case
from skald.notifications.models import Subscription
from skald.notifications.services import subscription_create

DEFAULT_DEMO_PASSWORD = "skald-demo"  # noqa: S105 - the documented demo login, printed by make run
DEMO_CASE_TITLE = "Checkout API returns 502 after deploy"

DEMO_USERS: dict[str, tuple[str, ...]] = {
    "operator": ("operator", "workflow"),
    "reviewer": ("reviewer",),
    "approver": ("approver",),
    "auditor": ("auditor",),
}

DEMO_LOGS = (
    (
        "nginx-error.log",
        "2026-11-30T09:12:01Z [error] upstream prematurely closed connection while reading response header "
        "from upstream, client: 10.0.4.7, server: checkout, upstream: http://10.0.8.21:8080/api/checkout\n"
        "2026-11-30T09:12:02Z [error] connect() failed (111: Connection refused) while connecting to "
        "upstream, upstream: http://10.0.8.21:8080/api/checkout\n",
    ),
    (
        "checkout-app.log",
        "2026-11-30T09:11:58Z INFO starting checkout-api version=4.2.0\n"
        "2026-11-30T09:11:59Z ERROR pool: could not connect to db-primary:5432: too many connections\n"
        "2026-11-30T09:12:00Z FATAL worker exited: database connection pool exhausted (max_pool=200)\n",
    ),
)


@dataclass(frozen=True)
class SeedReport:
    password: str
    password_from_env: bool
    created_users: tuple[str, ...]
    case_id: int


DEMO_MCP_SERVER = "demo"
SRE_AGENT = "sre"
# The demo's MCP call, allowed and gated: the status read runs (read-only on a trusted server), the
# restart waits for an approver (destructive: the default rules require approval).
SRE_PLAYBOOK = [
    {"tool": "mcp__demo__service_status", "args": {"service": "checkout-api"}},
    {"tool": "mcp__demo__restart_service", "args": {"service": "checkout-api"}},
    {"answer": "Checked and restarted checkout-api through the demo MCP server:\n{results}"},
]


def demo_mcp_ensure() -> str:
    """Register the demo's MCP server (stdio, from the repository) for the demo agents and enable it
    (its tools are pinned), unless it exists. Outside any transaction: enabling starts the server.

    Returns what happened, for the launcher's log line.
    """
    import sys

    from django.conf import settings

    from skald.core.errors import SkaldError
    from skald.mcp.models import McpServer
    from skald.mcp.services import mcp_server_create, pool
    from skald.models import Agent, AgentKind

    Agent.objects.get_or_create(name=SRE_AGENT, defaults={
        "kind": AgentKind.CHAT, "description": "Checks and restarts services through the demo MCP server",
        "system_prompt": "You are an SRE. Check a service's status, restart it if it is degraded, and report.",
        "allowed_tools": ["search_knowledge"], "client": "", "playbook": SRE_PLAYBOOK})
    if McpServer.objects.filter(name=DEMO_MCP_SERVER).exists():
        return "demo MCP server: already registered"
    if sys.executable not in settings.SKALD_MCP_STDIO_ALLOWLIST:
        return "demo MCP server: skipped (the Python interpreter is not in SKALD_MCP_STDIO_ALLOWLIST)"
    script = str(settings.BASE_DIR / "demo" / "mcp_server.py")
    try:
        mcp_server_create(actor=Actor.system("demo"), data={
            "name": DEMO_MCP_SERVER, "transport": "stdio", "argv": [sys.executable, script],
            "trust": "trusted", "agents": [SRE_AGENT, "troubleshooter", "log-analyst"], "enabled": True})
    except SkaldError as exc:
        return f"demo MCP server: registered but not enabled ({exc.code}: {exc.message})"
    finally:
        pool().close(DEMO_MCP_SERVER)  # the seeding process keeps no server running; workers start their own
    return "demo MCP server: registered and enabled"


DEMO_APPROVER_EMAIL = "approver@skald.invalid"
DEMO_NOTIFY_EVENTS = ["approval.pending", "approval.escalated", "approval.expiring", "approval.expired"]


def demo_notifications_ensure() -> None:
    """The demo approver hears of approvals by e-mail (its own address; the console backend prints
    the messages in `make run`'s output unless SKALD_EMAIL_HOST names an SMTP server)."""
    approver = User.objects.filter(username="approver").first()
    if approver is None or Subscription.objects.filter(owner=approver).exists():
        return
    if not approver.email:
        approver.email = DEMO_APPROVER_EMAIL
        approver.save(update_fields=["email"])
    subscription_create(actor=Actor.system("demo"), owner=approver, data={
        "name": "My approvals by e-mail", "channel": "user_email", "events": DEMO_NOTIFY_EVENTS})


def seed_demo(*, password: str | None) -> SeedReport:
    """Create what is missing; change nothing that exists except passwords when one is given."""
    chosen = password or DEFAULT_DEMO_PASSWORD
    created: list[str] = []
    with transaction.atomic():
        for username, roles in DEMO_USERS.items():
            user, made = User.objects.get_or_create(username=username, defaults={"is_staff": True})
            if made or password:
                user.set_password(chosen)
                user.save()
            if made:
                created.append(username)
            # Roles only added (nothing revoked); through the service, so each grant is audited.
            user_roles_set(actor=Actor.system("demo"), user=user,
                           groups={*user.groups.all(), *Group.objects.filter(name__in=roles)})
        admin, made = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if made or password:
            admin.set_password(chosen)
            admin.save()
        if made:
            created.append("admin")
        case = Case.objects.filter(title=DEMO_CASE_TITLE).first()
        if case is None:
            case = case_create(
                actor=Actor.system("demo"),
                title=DEMO_CASE_TITLE,
                description="Customers report 502 errors from the checkout API since the 09:10 deploy.",
                logs=DEMO_LOGS,
            )
        if created:
            audit_append(
                actor=Actor.system("demo"),
                kind=AuditKind.DEMO_SEEDED,
                subject_type="system",
                subject_id="demo",
                payload={"created_users": created},
            )
        seed_agents()
        demo_rules_ensure()
        demo_notifications_ensure()
    return SeedReport(
        password=chosen, password_from_env=bool(password), created_users=tuple(created), case_id=case.pk
    )
