"""MCP: Skald as a governed Model Context Protocol client (issue 29, docs/mcp.md).

Product core. ``models`` (servers and their pinned tools), ``definitions`` (pure: digests, names,
diffs), ``config`` (validation at save: the stdio allowlist, the SSRF screen, secret files),
``services`` (every write, audited), ``selectors``, ``client`` (the process's one event-loop thread
and its pooled sessions), ``tools`` (the kernel ``Tool`` each active MCP tool is offered as).
"""
