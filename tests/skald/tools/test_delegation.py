"""The delegation tools through Skald's wiring (SPEC S1-S3): list_agents, a sync execute_task in a
child frame with a freshly selected model, refusals the model reads, and the default governance."""

from __future__ import annotations

import json

import pytest

from approvals.models import PendingApproval
from approvals.rules.seed import default_rules_ensure
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.errors import ToolError
from loop.events import EventKind
from loop.models import Frame, SessionEvent, ToolCall
from loop.ports import AgentSpec
from loop.providers.loopback import text_turn, tool_turn
from skald.agents.seed import LOG_ANALYST_TOOLS, TROUBLESHOOTER_TOOLS
from skald.loop_adapters.selection import select_model
from skald.models import Agent, AgentKind
from tests.skald.conftest import conversation_kinds

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

ANALYSE = ("execute_task", {"agent": "log-analyst", "task": "find the 502s in the logs"})


def test_list_agents_names_the_task_agents_only(conversation, say, script, allow_all, inline_tasks):
    Agent.objects.create(name="helper", kind=AgentKind.TASK, description="helps", strength=2)
    Agent.objects.create(name="sysbot", kind=AgentKind.SYSTEM)
    script(tool_turn(("list_agents", {})), text_turn("ok"))
    say("who can help?")
    listed = json.loads(ToolCall.objects.get(tool="list_agents").result)["agents"]
    assert listed == [{"name": "helper", "description": "helps", "strength": 2},
                      {"name": "log-analyst", "description": Agent.objects.get(name="log-analyst").description,
                       "strength": 1}]


def test_a_sync_execute_task_runs_the_task_agent_in_a_child_frame(conversation, say, script, allow_all,
                                                                     inline_tasks):
    provider = script(tool_turn(ANALYSE), text_turn("pool exhausted at 09:12"), text_turn("diagnosed"))
    exchange = say("why 502?")
    assert exchange.outcome == "completed"

    child = Frame.objects.get(session=conversation, depth=1)
    assert child.agent == "log-analyst" and child.narrative.startswith("child:log-analyst:")
    assert child.outcome == "completed" and child.parent_call.tool == "execute_task"
    # Its own turns are in the session log under its narrative, starting with the task.
    assert conversation_kinds(conversation, child.narrative)[:2] == ["control:frame_opened", "user"]
    # Capability subtraction: the parent's tools ∩ the agent's, nothing else was offered.
    offered = {spec.name for spec in provider.calls[1].tools}
    assert offered == set(TROUBLESHOOTER_TOOLS) & set(LOG_ANALYST_TOOLS)
    # S3: a fresh selection (never the parent's), recorded on the frame and in its audit row.
    assert child.selection["rule"] == "auto:strength" and child.selection["client"] == "playbook"
    opened = AuditEvent.objects.get(kind=AuditKind.FRAME_OPENED, subject_id=str(child.pk))
    assert json.loads(opened.payload)["selection"] == child.selection
    assert AuditEvent.objects.filter(kind=AuditKind.FRAME_CLOSED, subject_id=str(child.pk)).count() == 1
    # The parent sees one subagent_result and the tool result that carries the child's text.
    (summary,) = SessionEvent.objects.filter(session=conversation, kind=EventKind.SUBAGENT_RESULT)
    assert summary.narrative == "" and summary.payload["content"] == "pool exhausted at 09:12"
    assert ToolCall.objects.get(tool="execute_task").result == "pool exhausted at 09:12"


def test_execute_task_refuses_a_chat_agent_and_an_unknown_one_visibly(conversation, say, script, allow_all,
                                                                        inline_tasks):
    script(tool_turn(("execute_task", {"agent": "troubleshooter", "task": "x"}),
                     ("execute_task", {"agent": "nobody", "task": "x"})), text_turn("ok"))
    say("delegate badly")
    results = list(ToolCall.objects.filter(tool="execute_task").order_by("index").values_list("result", flat=True))
    assert "(agent_not_task)" in results[0] and "(agent_unknown)" in results[1]
    assert not Frame.objects.filter(depth__gt=0).exists()


def test_execute_subtask_runs_the_callers_own_definition_with_fewer_tools(conversation, say, script, allow_all,
                                                                         inline_tasks):
    provider = script(tool_turn(("execute_subtask", {"task": "search only", "tools": ["search_knowledge", "bash"]})),
                      text_turn("searched"), text_turn("ok"))
    say("split it")
    child = Frame.objects.get(depth=1)
    assert child.agent == "troubleshooter"
    assert [spec.name for spec in provider.calls[1].tools] == ["search_knowledge"]


def test_the_model_choice_is_explicit_then_the_agents_then_by_strength(agents):
    weak = AgentSpec(name="w", kind="task", system_prompt="", tools=(), client="", strength=1)
    strong = AgentSpec(name="s", kind="task", system_prompt="", tools=(), client="", strength=5)
    configured = AgentSpec(name="c", kind="task", system_prompt="", tools=(), client="playbook")
    assert select_model(weak).as_dict() == {"rule": "auto:strength", "client": "playbook", "model": "playbook",
                                            "agent_strength": 1, "candidates": ["playbook"]}
    assert select_model(strong).client == "playbook"  # the strongest there is, recorded as auto
    assert select_model(configured).rule == "agent"
    assert select_model(weak, "playbook").rule == "explicit"
    with pytest.raises(ToolError) as refused:
        select_model(weak, "gpt-9")
    assert refused.value.code == "client_unknown"


def test_default_rules_park_delegation_show_the_child_and_allow_list_agents(conversation, say, script, api, carol,
                                                                            inline_tasks):
    default_rules_ensure()
    script(tool_turn(("list_agents", {}), ANALYSE), text_turn("logs say pool exhausted"), text_turn("done"))
    exchange = say("why 502?")
    assert exchange.status == "parked"
    assert ToolCall.objects.get(tool="list_agents").status == "completed"  # allowed by default
    approval = PendingApproval.objects.get(tool="execute_task")  # delegation waits for a human
    assert "Agent: log-analyst (task, strength 1)" in approval.preview
    assert "Task: find the 502s in the logs" in approval.preview
    assert "Child's tools: search_knowledge, read_logs, scratchpad_set, execute_task" in approval.preview
    assert not Frame.objects.filter(depth=1).exists()  # nothing ran before the human answered

    response = api(carol).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert response.status_code == 202, response.content
    assert Frame.objects.get(depth=1).outcome == "completed"
    exchange.refresh_from_db()
    assert exchange.outcome == "completed"
