"""SPEC L16 on the real HTTPS provider path: a credential a tool returns never reaches a request."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from loop.driver import LoopEnv, run_turns
from loop.outcomes import Completed
from loop.ports import ToolContext
from loop.providers.openai_compat import OpenAICompatProvider
from loop.tools.registry import FunctionTool, ToolRegistry
from tests.loop.fakes import MemoryAuditSink
from tests.loop.providers.fake_openai_server import FakeOpenAIServer, sse, text_chunks, tool_call_chunks
from tests.loop.tripwire_corpus import fakes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

SECRETS = {fake.kind: fake.snippet for fake in fakes(seed=61)}


def _leaky_tool(secret: str) -> FunctionTool:
    def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
        return f"config loaded:\nSTRIPE={secret}\nregion=eu-west-1"

    return FunctionTool("read_config", "Read the service config.", {"type": "object", "properties": {}}, run)


@pytest.mark.parametrize("kind", ["stripe-access-token", "url-password", "authorization-basic", "private-key-block"])
def test_a_credential_in_a_tool_result_never_reaches_the_provider(
    kind: str, make_env: Callable[..., LoopEnv], make_provider: Callable[..., OpenAICompatProvider],
    server: FakeOpenAIServer, audit: MemoryAuditSink,
) -> None:
    secret = SECRETS[kind]
    server.push(sse(tool_call_chunks([("call_1", "read_config", "{}")])), sse(text_chunks("Checked.")))
    env = make_env(make_provider(), tools=ToolRegistry([_leaky_tool(secret)]))

    result = run_turns(env, content="why does the deploy fail?")

    assert result.outcome == Completed(answer="Checked.")
    _first, second = server.requests
    tool_message = second.body["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"].startswith("[tool output withheld: it matched credential tripwires (")
    assert kind in tool_message["content"]
    for request in server.requests:
        body = json.dumps(request.body)
        # No fragment of the value either (JSON escapes a newline, so check the raw lines too).
        for fragment in secret.split("\n"):
            assert fragment not in body
    transitions = [row.payload for row in audit.rows if row.subject_type == "tool_call"]
    (settled,) = [payload for payload in transitions if payload.get("to") == "completed"]
    assert kind in settled["tripwires"]
    assert all(fragment not in json.dumps(transitions) for fragment in secret.split("\n"))
