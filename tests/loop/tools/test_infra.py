"""An infrastructure failure inside a tool breaks the exchange with a typed error; the model never
reads it as a tool result (issue 18). The failures are real: on PostgreSQL the tool's own server
backend is terminated under it; on SQLite another writer holds the database locked."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import pytest
from django.db import connection, transaction

from loop.driver import run_turns_keyed
from loop.errors import InfrastructureError
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, SessionEvent, ToolCall, ToolCallStatus
from loop.outcomes import Completed
from loop.ports import ToolContext
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.tools.infra import is_infrastructure_error
from loop.tools.registry import FunctionTool, ToolRegistry
from skald import metrics
from tests.loop.conftest import ECHO

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def _lose_the_database(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """A tool whose query meets a database that went away under it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
            # The server ends this backend as an administrator's kill or a failover would.
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            cursor.execute("SELECT count(*) FROM loop_session")  # meets the terminated backend
        return "the backend survived"
    # SQLite: another writer holds the database; this tool's write waits briefly, then fails.
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        connection.ensure_connection()
        connection.connection.execute("PRAGMA busy_timeout = 50")
        with transaction.atomic():  # BEGIN IMMEDIATE: "database is locked"
            pass
        return "the lock was free"
    finally:
        holder.rollback()
        holder.close()


LOSE_DB = FunctionTool("lookup", "Look something up in the database.", {"type": "object"}, _lose_the_database)


def test_it_breaks_the_exchange_with_a_typed_error_and_never_records_a_tool_result(make_env, session) -> None:
    provider = LoopbackProvider([tool_turn(("lookup", {})), text_turn("the model must never get here")])
    env = make_env(provider, tools=ToolRegistry([LOSE_DB, ECHO]))

    with pytest.raises(InfrastructureError) as raised:
        run_turns_keyed(env, request_key="k1", content="look it up")

    assert raised.value.code == "tool_infrastructure_error"
    assert is_infrastructure_error(raised.value.__cause__)
    exchange = Exchange.objects.get(session=session)
    assert (exchange.status, exchange.error_code) == (ExchangeStatus.BROKEN, "tool_infrastructure_error")
    kinds = set(SessionEvent.objects.filter(session=session).values_list("kind", flat=True))
    assert EventKind.TOOL_RESULT not in kinds and EventKind.TOOL_DONE not in kinds
    call = ToolCall.objects.get(exchange=exchange)
    assert call.status == ToolCallStatus.RUNNING  # left for recovery, not failed into the history
    assert len(provider.calls) == 1  # the model was not asked again with an error result
    assert 'skald_exchanges_broken_total{code="tool_infrastructure_error"} 1.0' in metrics.render().decode()


def test_a_tool_error_about_the_data_stays_model_visible(make_env, session) -> None:
    def duplicate(arguments: Mapping[str, Any], context: ToolContext) -> str:
        from django.db import IntegrityError

        raise IntegrityError("duplicate key value violates unique constraint")

    tool = FunctionTool("insert", "Insert a row.", {"type": "object"}, duplicate)
    provider = LoopbackProvider([tool_turn(("insert", {})), text_turn("it was a duplicate")])
    env = make_env(provider, tools=ToolRegistry([tool]))

    result = run_turns_keyed(env, request_key="k1", content="insert it")

    assert isinstance(result.outcome, Completed)
    call = ToolCall.objects.get(session=session)
    assert call.status == ToolCallStatus.FAILED and "IntegrityError" in call.result


def test_the_next_message_repairs_the_broken_call_and_the_session_goes_on(make_env, session) -> None:
    from loop.recovery import INTERRUPTED_RESULT
    from skald.models import Agent, AgentKind
    from skald.sessions.services import repair_stale_exchange

    Agent.objects.create(name="tester", kind=AgentKind.CHAT, system_prompt="You test.", allowed_tools=["lookup"])

    broken = LoopbackProvider([tool_turn(("lookup", {}))])
    with pytest.raises(InfrastructureError):
        run_turns_keyed(make_env(broken, tools=ToolRegistry([LOSE_DB])), request_key="k1", content="look it up")

    repaired = repair_stale_exchange(session=session)  # what the next message does first (SPEC R3)
    later = LoopbackProvider([text_turn("the lookup was interrupted; I will try again later")])
    result = run_turns_keyed(make_env(later, tools=ToolRegistry([LOSE_DB])), request_key="k2", content="and now?")

    assert repaired is not None
    assert (repaired.status, Exchange.objects.get(pk=repaired.pk).error_code) == (
        ExchangeStatus.BROKEN, "tool_infrastructure_error")  # the break keeps its own code
    call = ToolCall.objects.get(exchange=repaired)
    assert call.status == ToolCallStatus.INTERRUPTED and call.result == INTERRUPTED_RESULT
    assert isinstance(result.outcome, Completed)
