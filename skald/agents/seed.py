"""Seed the catalog's built-in agents (idempotent; an operator's edits are kept)."""

from __future__ import annotations

from skald.models import Agent, AgentKind

TROUBLESHOOTER_PROMPT = (
    "You are Skald's troubleshooter. Investigate the case: search accepted knowledge, read the case's "
    "logs, write a findings report to reports/findings.md, propose what others should know, and answer "
    "with a short diagnosis. If you are stuck, ask a human."
)

TROUBLESHOOTER_TOOLS = [
    "search_knowledge", "read_logs", "read_file", "write_file", "scratchpad_get", "scratchpad_set",
    "propose_knowledge", "ask_human",
]

# The deterministic posture's script: one step per provider turn (see loop.providers.playbook).
TROUBLESHOOTER_PLAYBOOK = [
    {"tool": "search_knowledge", "args": {"query": "{input}"}},
    {"tool": "read_logs", "args": {}},
    {
        "tool": "write_file",
        "args": {
            "path": "reports/findings.md",
            "content": "# Findings\n\n## Ticket\n{input}\n\n## Evidence\n{results}\n",
        },
    },
    {
        "tool": "propose_knowledge",
        "args": {
            "title": "Troubleshooting finding",
            "body": "Ticket: {input}\n\nWhat the investigation found:\n{results}",
            "evidence": "reports/findings.md and the case logs",
        },
    },
    {"answer": "Diagnosis written to reports/findings.md and proposed for review. Evidence:\n{results}"},
]


def seed_agents() -> None:
    Agent.objects.get_or_create(
        name="troubleshooter",
        defaults={
            "kind": AgentKind.CHAT,
            "description": "Troubleshoots a case (GDL runs)",
            "system_prompt": TROUBLESHOOTER_PROMPT,
            "allowed_tools": TROUBLESHOOTER_TOOLS,
            "client": "",
            "playbook": TROUBLESHOOTER_PLAYBOOK,
        },
    )
