"""The MCP settings' system checks (skald.E020, skald.E021, skald.W020)."""

from __future__ import annotations

from skald.checks import check_mcp_settings


def test_bad_cidrs_fail_the_check_and_a_bare_program_name_warns(settings):
    settings.SKALD_MCP_ALLOW_CIDRS = "10.0.0.0/8, not-a-network"
    settings.SKALD_MCP_STDIO_ALLOWLIST = ("/usr/bin/python3", "npx")
    assert [problem.id for problem in check_mcp_settings()] == ["skald.E020", "skald.W020"]


def test_good_settings_pass(settings):
    settings.SKALD_MCP_ALLOW_CIDRS = "127.0.0.0/8"
    settings.SKALD_MCP_STDIO_ALLOWLIST = ("/usr/bin/python3",)
    assert check_mcp_settings() == []


def test_an_unknown_stdio_sandbox_mode_fails_the_check(settings):
    settings.SKALD_MCP_ALLOW_CIDRS = ""
    settings.SKALD_MCP_STDIO_ALLOWLIST = ()
    settings.SKALD_MCP_STDIO_SANDBOX = "on"
    assert [problem.id for problem in check_mcp_settings()] == ["skald.E021"]
