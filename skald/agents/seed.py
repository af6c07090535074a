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
    "propose_knowledge", "ask_human", "list_agents", "execute_task", "execute_subtask",
]

LOG_ANALYST = "log-analyst"
LOG_ANALYST_PROMPT = (
    "You are a log analyst working for another agent. Read the case's logs, find the errors that explain "
    "the task, and answer with the evidence (timestamps and messages), nothing else."
)
# execute_task: a long log may be split among further analysts (each a level deeper, at most 5).
LOG_ANALYST_TOOLS = ["read_logs", "search_knowledge", "scratchpad_set", "execute_task"]
LOG_ANALYST_PLAYBOOK = [
    {"tool": "read_logs", "args": {}},
    {"answer": "Log analysis for: {input}\n\n{last_result}"},
]

# The deterministic posture's script: one step per provider turn (see loop.providers.playbook).
TROUBLESHOOTER_PLAYBOOK = [
    {"tool": "search_knowledge", "args": {"query": "{input}"}},
    # Delegation (SPEC S1): the log analysis runs in a child frame of a task agent (sync), and a
    # second look runs as an async task whose result arrives later as a task_completed call.
    {"tool": "execute_task",
     "args": {"agent": LOG_ANALYST, "task": "Find the errors in the case logs behind: {input}"}},
    {"tool": "execute_task", "args": {"agent": LOG_ANALYST, "mode": "async",
                                      "task": "Check the case logs again for anything recurring behind: {input}"}},
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
            "title": "Finding: {input_line}",  # distinct per ticket, not one title for every run
            "body": "Ticket: {input}\n\nWhat the investigation found:\n{results}",
            "evidence": "reports/findings.md and the case logs",
        },
    },
    {"answer": "Diagnosis written to reports/findings.md and proposed for review. Evidence:\n{results}"},
    {"on": "task_completed", "answer": "The async log check came back:\n{last_result}"},
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
    Agent.objects.get_or_create(
        name=LOG_ANALYST,
        defaults={
            "kind": AgentKind.TASK,
            "description": "Reads a case's logs and reports the errors that explain a symptom",
            "system_prompt": LOG_ANALYST_PROMPT,
            "allowed_tools": LOG_ANALYST_TOOLS,
            "client": "",
            "strength": 1,
            "playbook": LOG_ANALYST_PLAYBOOK,
        },
    )
