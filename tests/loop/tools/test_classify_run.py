"""Classifying a tool's run is pure: the same run always gives the same result, no thread needed."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from loop.errors import HumanNeeded, InfrastructureError, ToolError
from loop.models import ToolCallStatus
from loop.ports import DelegateReturn
from loop.tools.execute import ToolOutcome, ToolRun, classify_run

CAP = 200
OPENAI_KEY = "sk-" + "proj-" + "a1B2c3D4e5" * 7 + "a1B2" + "T3Blbk" + "FJ" + "Z9y8X7w6V5" * 7 + "Z9y8"


def classify(**run: object) -> ToolOutcome:
    return classify_run(ToolRun("lookup", 2.0, **run), output_cap=CAP)  # type: ignore[arg-type]


def test_it_completes_with_the_tools_output():
    assert classify(value="found it") == ToolOutcome(ToolCallStatus.COMPLETED, "found it", False)


def test_it_truncates_long_output_visibly():
    outcome = classify(value="x" * 500)
    assert outcome.truncated and "output truncated" in outcome.content and len(outcome.content.encode()) <= CAP


def test_a_timeout_is_a_failed_call_naming_the_limit():
    outcome = classify(timed_out=True)
    assert (outcome.status, outcome.content, outcome.is_error) == (
        ToolCallStatus.FAILED, "tool error: lookup timed out after 2 s", True)


def test_a_cancelled_call_is_canceled_with_its_reason():
    outcome = classify(value="late", canceled="stop requested")
    assert (outcome.status, outcome.content) == (ToolCallStatus.CANCELED, "tool call canceled: stop requested")


def test_a_tool_error_is_model_visible_with_its_code():
    outcome = classify(error=ToolError("no such row", code="not_found"))
    assert (outcome.status, outcome.content) == (ToolCallStatus.FAILED, "tool error (not_found): no such row")


def test_a_crash_names_only_the_exception_type():
    outcome = classify(error=KeyError("secret detail"))
    assert (outcome.status, outcome.content) == (ToolCallStatus.FAILED, "tool error: lookup failed (KeyError)")


def test_a_tool_asking_a_human_waits_for_one():
    outcome = classify(error=HumanNeeded("which account?"))
    assert (outcome.status, outcome.content, outcome.is_error) == (ToolCallStatus.AWAITING_HUMAN, "which account?",
                                                                    False)


def test_a_credential_in_the_output_is_withheld():
    outcome = classify(value=f"key {OPENAI_KEY} here")
    assert outcome.status == ToolCallStatus.COMPLETED and outcome.withheld
    assert OPENAI_KEY not in outcome.content


def test_a_delegates_ending_is_its_result():
    ended = DelegateReturn(content="done", status=ToolCallStatus.COMPLETED, subagent={"agent": "helper"})
    assert classify(value=ended) == ToolOutcome(ToolCallStatus.COMPLETED, "done", False, subagent={"agent": "helper"})


def test_a_database_failure_is_the_infrastructures_not_the_tools():
    with pytest.raises(InfrastructureError) as raised:
        classify(error=OperationalError("server closed the connection"))
    assert raised.value.code == "tool_infrastructure_error"
