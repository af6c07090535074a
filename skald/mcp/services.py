"""Every write to MCP servers and tools: one service per kind of write, each audited in its transaction.

Validation happens at save (:mod:`skald.mcp.config`): an unlisted stdio program or an SSRF-refused
URL never reaches the database. Enabling a server discovers its tools and pins their definitions;
a later listing that differs quarantines the tool (:func:`mcp_server_refresh`) until an admin
approves the new definition (:func:`mcp_tool_approve`) or keeps it quarantined
(:func:`mcp_tool_keep_quarantined`). Talking to a server happens outside any transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.core import clock
from skald.core.errors import Conflict
from skald.mcp import config, tools_cache
from skald.mcp.calls import McpUnavailable, ServerSpec
from skald.mcp.definitions import Definition, valid_tool_name
from skald.mcp.models import McpServer, McpServerStatus, McpTool, McpToolStatus, McpTransport, McpTrust

if TYPE_CHECKING:
    from skald.mcp.client import McpPool

logger = logging.getLogger(__name__)
SERVER_INPUT = ("name", "transport", "argv", "url", "secret_env", "secret_headers", "trust", "agents", "enabled",
                "allow_sampling")


def pool() -> McpPool:
    """The process's pool, told to list again when a server says its tools changed (the SDK is
    imported here, by the first process that opens a connection: skald/mcp/calls.py)."""
    from skald.mcp.client import pool as process_pool

    shared = process_pool()
    shared.on_list_changed = _list_changed
    return shared


def _list_changed(name: str) -> None:
    """A server said ``notifications/tools/list_changed``: list now and compare with the pins (a
    differing definition is quarantined). Runs on a thread of its own, off the event loop."""
    from django.db import connection

    try:
        server = McpServer.objects.filter(name=name, enabled=True).first()
        if server is not None:
            mcp_server_refresh(server=server)
    except Exception:  # a failed refresh is logged; the next call compares the listing again
        logger.exception("MCP server %s: refresh after tools/list_changed failed", name)
    finally:
        connection.close()  # this thread's own


def _view(server: McpServer) -> dict[str, Any]:
    """What the audit row records of a server (file paths of secrets, never their content)."""
    return {"name": server.name, "transport": server.transport, "argv": server.argv, "url": server.url,
            "secret_env": server.secret_env, "secret_headers": server.secret_headers, "trust": server.trust,
            "agents": server.agents, "enabled": server.enabled, "allow_sampling": server.allow_sampling}


def _validated(data: Mapping[str, Any], *, current: McpServer | None) -> dict[str, Any]:
    unknown = sorted(set(data) - set(SERVER_INPUT))
    if unknown:
        raise config.McpConfigError(f"unknown fields: {', '.join(unknown)[:200]}", code="mcp_field_unknown")
    merged: dict[str, Any] = {} if current is None else {k: getattr(current, k) for k in SERVER_INPUT}
    merged.update(data)
    if current is not None and "name" in data and data["name"] != current.name:
        raise config.McpConfigError("a server's name cannot change (tools are named after it)",
                                    code="mcp_name_immutable", field="name")
    merged["name"] = config.check_name(merged.get("name"))
    transport = merged.get("transport")
    if transport not in McpTransport.values:
        raise config.McpConfigError("transport must be stdio or http", code="mcp_transport_invalid", field="transport")
    trust = merged.get("trust", McpTrust.UNTRUSTED)
    if trust not in McpTrust.values:
        raise config.McpConfigError("trust must be untrusted or trusted", code="mcp_trust_invalid", field="trust")
    merged["trust"] = trust
    if not isinstance(merged.get("enabled", False), bool):
        raise config.McpConfigError("enabled must be a boolean", code="mcp_enabled_invalid", field="enabled")
    merged["enabled"] = bool(merged.get("enabled", False))
    if not isinstance(merged.get("allow_sampling", False), bool):
        raise config.McpConfigError("allow_sampling must be a boolean", code="mcp_enabled_invalid",
                                    field="allow_sampling")
    merged["allow_sampling"] = bool(merged.get("allow_sampling", False))
    merged["agents"] = config.check_agents(merged.get("agents", []))
    if transport == McpTransport.STDIO:
        merged["argv"] = config.check_argv(merged.get("argv"))
        merged["url"] = ""
        merged["secret_env"] = config.check_secret_files(merged.get("secret_env") or {}, field="secret_env",
                                                         header=False)
        merged["secret_headers"] = {}
    else:
        merged["url"] = config.screen_url(merged.get("url")).url
        merged["argv"] = []
        merged["secret_headers"] = config.check_secret_files(merged.get("secret_headers") or {},
                                                             field="secret_headers", header=True)
        merged["secret_env"] = {}
    return merged


def server_input_validate(data: Mapping[str, Any], *, current: McpServer | None) -> dict[str, Any]:
    """The configuration ``data`` would give (merged over ``current``), validated as at save.

    Raises:
        McpConfigError: a stable ``mcp_*`` code naming the refused field.
    """
    return _validated(data, current=current)


def mcp_server_create(*, actor: Actor, data: Mapping[str, Any]) -> McpServer:
    """Validate and store a server (disabled), then enable it when ``data`` asks.

    Raises:
        McpConfigError: a stable ``mcp_*`` code naming the refused field.
        Conflict: ``mcp_name_taken``.
    """
    fields = _validated(data, current=None)
    wants_enabled = fields.pop("enabled")
    now = clock.now()
    with transaction.atomic():
        if McpServer.objects.filter(name=fields["name"]).exists():
            raise Conflict("a server with this name exists", code="mcp_name_taken", field="name")
        server = McpServer.objects.create(**fields, enabled=False, created_at=now, updated_at=now)
        audit_append(actor=actor, kind=AuditKind.MCP_SERVER_CHANGED, subject_type="mcp_server",
                     subject_id=server.name, payload={"created": _view(server)})
    if wants_enabled:
        server = mcp_server_enable(actor=actor, server=server)
    return server


def mcp_server_update(*, actor: Actor, server: McpServer, data: Mapping[str, Any]) -> McpServer:
    """Change a server's configuration. ``enabled`` switching on enables it (discovers and pins);
    switching off disables it. A changed command or URL reconnects at the next use."""
    fields = _validated(data, current=server)
    wants_enabled = fields.pop("enabled")
    changed = sorted(k for k, v in fields.items() if getattr(server, k) != v)
    if changed:
        with transaction.atomic():
            for key in changed:
                setattr(server, key, fields[key])
            server.updated_at = clock.now()
            server.save()
            audit_append(actor=actor, kind=AuditKind.MCP_SERVER_CHANGED, subject_type="mcp_server",
                         subject_id=server.name, payload={"changed": changed, "now": _view(server)})
        transaction.on_commit(tools_cache.forget)
        transaction.on_commit(lambda: pool().close(server.name))
    if wants_enabled and not server.enabled:
        return mcp_server_enable(actor=actor, server=server)
    if not wants_enabled and server.enabled:
        return mcp_server_disable(actor=actor, server=server)
    return server


def mcp_server_delete(*, actor: Actor, server: McpServer) -> None:
    name = server.name
    with transaction.atomic():
        view = _view(server)
        server.delete()
        audit_append(actor=actor, kind=AuditKind.MCP_SERVER_CHANGED, subject_type="mcp_server", subject_id=name,
                     payload={"deleted": view})
    transaction.on_commit(tools_cache.forget)
    pool().close(name)
    tools_cache.forget()


def mcp_server_disable(*, actor: Actor, server: McpServer) -> McpServer:
    with transaction.atomic():
        server.enabled = False
        server.updated_at = clock.now()
        server.save(update_fields=["enabled", "updated_at"])
        audit_append(actor=actor, kind=AuditKind.MCP_SERVER_CHANGED, subject_type="mcp_server",
                     subject_id=server.name, payload={"disabled": True})
    tools_cache.forget()
    pool().close(server.name)
    return server


def server_spec(server: McpServer) -> ServerSpec:
    """How to connect to ``server`` now: secrets read from their files, the URL screened again (a
    DNS answer may have changed since the save), a stdio server's hermetic environment."""
    if server.transport == McpTransport.STDIO:
        config.check_argv(list(server.argv))  # the allowlist may have shrunk since the save
        from skald.core.child_env import hermetic_env

        root = settings.SKALD_WORKSPACE_ROOT / f"mcp-{server.name}"
        root.mkdir(parents=True, exist_ok=True)
        # Only what any program needs (the SDK's own default list), never Skald's configuration or
        # the worker's other variables: the server gets its secrets by name, from their files.
        from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS  # the SDK's own list of what a server inherits

        env = {k: v for k, v in hermetic_env().items() if k in DEFAULT_INHERITED_ENV_VARS}
        env.update(config.read_secrets(server.secret_env))
        from skald.mcp.sandbox import stdio_confinement

        return ServerSpec(name=server.name, transport="stdio", argv=tuple(server.argv), env=env, cwd=str(root),
                          sandbox=stdio_confinement(server.argv))
    screened = config.screen_url(server.url)
    return ServerSpec(name=server.name, transport="http", url=server.url, address=screened.address,
                      headers=config.read_secrets(server.secret_headers))


def _discover(server: McpServer) -> tuple[Definition, ...]:
    """List the server's tools now, recording the connection's status either way.

    Raises:
        Conflict: ``mcp_server_unreachable`` (409) with the error recorded on the server.
    """
    try:
        listing = pool().listing(server_spec(server), fresh=True)
    except (McpUnavailable, config.McpConfigError) as exc:
        detail = exc.detail if isinstance(exc, McpUnavailable) else exc.message
        mcp_server_status_record(server=server, error=detail)
        raise Conflict(f"the server could not be reached: {detail}"[:300], code="mcp_server_unreachable") from None
    mcp_server_status_record(server=server, error="")
    return listing


def mcp_server_status_record(*, server: McpServer, error: str) -> None:
    """Record whether the last contact worked (operational state, not configuration: not audited,
    so a flapping server does not flood the chain; its failures are in the metrics and logs)."""
    status = McpServerStatus.FAILING if error else McpServerStatus.CONNECTED
    McpServer.objects.filter(pk=server.pk).update(status=status, last_error=error[:500], checked_at=clock.now())
    server.status, server.last_error = status, error[:500]


def mcp_server_enable(*, actor: Actor, server: McpServer) -> McpServer:
    """Discover the server's tools and pin each definition as listed now; enable the server.

    An admin enabling a server is the approval of what it lists at that moment: earlier pins and
    quarantines are replaced by the current listing; tools no longer listed are ``gone``.
    """
    listing = _discover(server)
    now = clock.now()
    with transaction.atomic():
        current = {t.name: t for t in McpTool.objects.select_for_update().filter(server=server)}
        pinned: dict[str, str] = {}
        skipped: list[str] = []
        for definition in listing:
            if not valid_tool_name(definition.name):
                skipped.append(definition.name[:64])
                continue
            row = current.pop(definition.name, None) or McpTool(server=server, name=definition.name, pinned_at=now)
            _pin(row, definition, now)
            row.save()
            pinned[definition.name] = row.digest
        gone = sorted(current)
        McpTool.objects.filter(server=server, name__in=gone).update(status=McpToolStatus.GONE, pending={},
                                                                     pending_digest="", changed_at=now)
        server.enabled = True
        server.updated_at = now
        server.save(update_fields=["enabled", "updated_at"])
        audit_append(actor=actor, kind=AuditKind.MCP_TOOLS_PINNED, subject_type="mcp_server", subject_id=server.name,
                     payload={"pinned": pinned, "gone": gone, "skipped": skipped})
    tools_cache.forget()
    return server


def _pin(row: McpTool, definition: Definition, now: Any) -> None:
    row.description = definition.description
    row.input_schema = dict(definition.input_schema)
    row.annotations = dict(definition.annotations)
    row.digest = definition.digest
    row.status = McpToolStatus.ACTIVE
    row.pending, row.pending_digest = {}, ""
    row.pinned_at = row.changed_at = now


def mcp_server_refresh(*, server: McpServer, listing: Sequence[Definition] | None = None,
                       actor: Actor | None = None) -> dict[str, list[str]]:
    """Compare a listing (``None``: list now) with the pins; a differing or new tool is quarantined
    with its listed definition pending, a vanished one is ``gone``, one listed as pinned again is
    active. Returns what changed, by kind. Each quarantine is audited.
    """
    if listing is None:
        listing = _discover(server)
    actor = actor or Actor.system("mcp")
    now = clock.now()
    changes: dict[str, list[str]] = {"quarantined": [], "gone": [], "restored": []}
    with transaction.atomic():
        current = {t.name: t for t in McpTool.objects.select_for_update().filter(server=server)}
        for definition in listing:
            if not valid_tool_name(definition.name):
                continue
            row = current.pop(definition.name, None)
            if row is None:  # a tool listed after enablement: nobody pinned it
                row = McpTool(server=server, name=definition.name, digest="", input_schema={}, pinned_at=now,
                              changed_at=now)
            digest = definition.digest
            if digest == row.digest:
                if row.status != McpToolStatus.ACTIVE:
                    row.status, row.pending, row.pending_digest, row.changed_at = McpToolStatus.ACTIVE, {}, "", now
                    row.save()
                    changes["restored"].append(row.name)
                continue
            if row.status == McpToolStatus.QUARANTINED and row.pending_digest == digest:
                continue
            row.status, row.pending, row.pending_digest, row.changed_at = (
                McpToolStatus.QUARANTINED, definition.as_dict(), digest, now)
            row.save()
            changes["quarantined"].append(row.name)
            audit_append(actor=actor, kind=AuditKind.MCP_TOOL_QUARANTINED, subject_type="mcp_tool",
                         subject_id=f"{server.name}/{row.name}"[:64],
                         payload={"server": server.name, "tool": row.name, "pinned": row.digest, "listed": digest})
        for row in current.values():
            if row.status != McpToolStatus.GONE:
                row.status, row.pending, row.pending_digest, row.changed_at = McpToolStatus.GONE, {}, "", now
                row.save()
                changes["gone"].append(row.name)
        if changes["gone"]:
            audit_append(actor=actor, kind=AuditKind.MCP_TOOL_QUARANTINED, subject_type="mcp_server",
                         subject_id=server.name, payload={"server": server.name, "gone": changes["gone"]})
    if any(changes.values()):
        tools_cache.forget()
    return changes


def mcp_tool_approve(*, actor: Actor, tool: McpTool, digest: str) -> McpTool:
    """Pin the quarantined tool's pending definition. ``digest`` must be the one the admin saw, so a
    definition that changed again meanwhile is never approved unseen.

    Raises:
        Conflict: ``mcp_not_quarantined`` or ``mcp_definition_changed``.
    """
    with transaction.atomic():
        row = McpTool.objects.select_for_update().select_related("server").get(pk=tool.pk)
        if row.status != McpToolStatus.QUARANTINED or not row.pending:
            raise Conflict("the tool is not quarantined", code="mcp_not_quarantined")
        if row.pending_digest != digest:
            raise Conflict("the pending definition changed since it was shown", code="mcp_definition_changed")
        old = row.digest
        _pin(row, Definition.of(row.pending), clock.now())
        row.save()
        audit_append(actor=actor, kind=AuditKind.MCP_DEFINITION_APPROVED, subject_type="mcp_tool",
                     subject_id=f"{row.server.name}/{row.name}"[:64],
                     payload={"server": row.server.name, "tool": row.name, "old": old, "new": row.digest})
    tools_cache.forget()
    return row


def mcp_tool_keep_quarantined(*, actor: Actor, tool: McpTool) -> McpTool:
    """Record an admin's decision to keep the tool quarantined (it stays unoffered)."""
    with transaction.atomic():
        row = McpTool.objects.select_for_update().select_related("server").get(pk=tool.pk)
        if row.status != McpToolStatus.QUARANTINED:
            raise Conflict("the tool is not quarantined", code="mcp_not_quarantined")
        audit_append(actor=actor, kind=AuditKind.MCP_DEFINITION_KEPT, subject_type="mcp_tool",
                     subject_id=f"{row.server.name}/{row.name}"[:64],
                     payload={"server": row.server.name, "tool": row.name, "pending": row.pending_digest})
    return row
