"""External callers (issue 15): a client generated from the live schema imports in full and drives
the main journeys against a real server (pytest-django's live server on the test database: SQLite,
then PostgreSQL in ``make test``'s second pass). Tasks run inline at commit; the model is scripted.

Every client is built with ``raise_on_unexpected_status``: a status the schema does not list fails
the journey, and every body is parsed into the generated models, so a shape the schema does not
describe fails it too.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from approvals.rules.seed import default_rules_ensure
from loop.providers.loopback import text_turn, tool_turn
from skald.agents.seed import seed_agents
from tests.conftest import PASSWORD

TICKET = "Checkout answers 502 since the 10:40 deploy"
PROPOSED = ("propose_knowledge", {"title": "Pool exhaustion causes checkout 502s",
                                  "body": "Raise the DB pool to 40; alert on pool wait over 200 ms."})
WRITE = ("write_file", {"path": "notes/diagnosis.md", "content": "pool exhausted at 10:41\n"})


def test_every_generated_module_imports(generated_client: ModuleType) -> None:
    names = [info.name for info in pkgutil.walk_packages(generated_client.__path__, f"{generated_client.__name__}.")]
    for name in names:
        importlib.import_module(name)
    endpoints = [name for name in names if ".api." in name and not name.endswith("__init__")]
    assert len(endpoints) >= 33, endpoints


@pytest.fixture
def login(generated_client: ModuleType, live_server: Any) -> Iterator[Callable[[str], Caller]]:
    """``login(username)`` → a :class:`Caller`; its keep-alive connection is closed after the test
    (an open one would keep the live server's request thread, and its database session, alive)."""
    callers: list[Caller] = []

    def build(username: str) -> Caller:
        callers.append(Caller(generated_client, live_server.url, username))
        return callers[-1]

    yield build
    for caller in callers:
        caller.client.get_httpx_client().close()


@pytest.fixture
def world(settings: Any, tmp_path: Any) -> None:
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    seed_agents()
    default_rules_ensure()


class Caller:
    """One person calling Skald through the generated client, logged in with a password."""

    def __init__(self, sk: ModuleType, base_url: str, username: str) -> None:
        from skald_client.api.auth import auth_token_obtain, auth_token_refresh
        from skald_client.models import TokenObtainPairRequest, TokenRefreshRequest

        with sk.Client(base_url=base_url, raise_on_unexpected_status=True) as anonymous:
            pair = auth_token_obtain.sync(client=anonymous, body=TokenObtainPairRequest(username=username,
                                                                                        password=PASSWORD))
            assert isinstance(pair, sk.models.TokenObtainPair), pair
            refreshed = auth_token_refresh.sync(client=anonymous, body=TokenRefreshRequest(refresh=pair.refresh))
            assert isinstance(refreshed, sk.models.TokenRefresh), refreshed
        self.client = sk.AuthenticatedClient(base_url=base_url, token=refreshed.access,
                                             raise_on_unexpected_status=True)

    def ok(self, endpoint: ModuleType, expected: type, **kwargs: Any) -> Any:
        """Call ``endpoint``; its parsed answer must be the ``expected`` model (not an Error)."""
        response = endpoint.sync_detailed(client=self.client, **kwargs)
        assert isinstance(response.parsed, expected), (response.status_code, response.content)
        return response


@pytest.mark.db_sensitive
def test_a_conversation_through_the_generated_client(generated_client, login, world, alice, script) -> None:
    """token → session → message → exchange outcome → events."""
    from skald_client.api.sessions import (
        session_create,
        session_events_list,
        session_exchange_get,
        session_get,
        session_list,
        session_message_send,
    )
    from skald_client.models import Error, EventPage, Exchange, MessageRequest, Session, SessionCreateRequest

    script(text_turn("The pool is exhausted: 10 connections, 40 waiting."))
    sk, alice_ = generated_client, login("alice")

    session = alice_.ok(session_create, Session, body=SessionCreateRequest(agent="troubleshooter",
                                                                           title="checkout 502s")).parsed
    assert session.agent == "troubleshooter" and session.owner == alice.pk
    assert [s.id for s in alice_.ok(session_list, list).parsed] == [session.id]

    sent = alice_.ok(session_message_send, Exchange, session_id=session.id, idempotency_key="msg-1",
                     body=MessageRequest(content=TICKET))
    assert sent.status_code == 202
    again = alice_.ok(session_message_send, Exchange, session_id=session.id, idempotency_key="msg-1",
                      body=MessageRequest(content=TICKET))
    assert again.parsed.id == sent.parsed.id  # the key names the exchange: a retry admits nothing new

    exchange = alice_.ok(session_exchange_get, Exchange, session_id=session.id, exchange_id=sent.parsed.id).parsed
    assert exchange.status == sk.models.ExchangeStatusEnum.SETTLED and exchange.outcome == "completed"
    assert exchange.receipt["outcome"] == "completed"

    page = alice_.ok(session_events_list, EventPage, session_id=session.id, after=0, limit=500).parsed
    kinds = [event.kind for event in page.results]
    assert "user" in kinds and "assistant" in kinds and not page.more
    said = [event.payload for event in page.results if event.kind == "assistant"]
    assert any("pool is exhausted" in str(payload) for payload in said)
    assert alice_.ok(session_get, Session, session_id=session.id).parsed.last_seq == page.last_seq

    missing = session_exchange_get.sync_detailed(client=alice_.client, session_id=session.id, exchange_id=999999)
    assert missing.status_code == 404 and isinstance(missing.parsed, Error)
    assert missing.parsed.code == "exchange_not_found"


@pytest.mark.db_sensitive
def test_a_governed_run_through_the_generated_client(generated_client, login, world, alice, carol, bob, dave,
                                                     script) -> None:
    """case → GDL launch → run → pending approval → resolve → proposal → accept; audit verify."""
    from skald_client.api.approvals import approval_list, approval_resolve_by_tool_call
    from skald_client.api.audit import audit_verify
    from skald_client.api.cases import case_create, case_get
    from skald_client.api.proposals import proposal_accept, proposal_get, proposal_list
    from skald_client.api.runs import run_events_list, run_gdl_launch, run_get
    from skald_client.models import (
        AcceptRequest,
        Approval,
        ApprovalListStatus,
        ApproveDecisionEnum,
        ApproveInputRequest,
        AuditVerify,
        Case,
        CaseInputRequest,
        EventPage,
        GdlLaunchInputRequest,
        LogInputRequest,
        PaginatedProposalList,
        ProposalDetail,
        ProposalListStatus,
        Resolution,
        Run,
    )

    provider = script(tool_turn(WRITE), tool_turn(PROPOSED), text_turn("Diagnosed: the DB pool is exhausted."))
    sk = generated_client
    alice_, carol_, bob_, dave_ = (login(name) for name in ("alice", "carol", "bob", "dave"))

    case = alice_.ok(case_create, Case, body=CaseInputRequest(
        title="Checkout 502s", description="Since the deploy",
        logs=[LogInputRequest(name="app.log", content="ERROR pool: timeout waiting for connection")])).parsed
    assert [log.name for log in alice_.ok(case_get, Case, case_id=case.id).parsed.logs] == ["app.log"]

    launched = alice_.ok(run_gdl_launch, Run, case_id=case.id, idempotency_key="launch-1",
                         body=GdlLaunchInputRequest(ticket=TICKET))
    assert launched.status_code == 202 and launched.headers["Location"] == f"/api/runs/{launched.parsed.id}/"
    run = alice_.ok(run_get, Run, run_id=launched.parsed.id).parsed
    assert run.status == sk.models.RunStatusEnum.AWAITING_HUMAN and run.ticket == TICKET

    pending = carol_.ok(approval_list, list, status=ApprovalListStatus.PENDING, session=run.session).parsed
    assert len(pending) == 1 and isinstance(pending[0], Approval) and pending[0].tool == "write_file"
    resolved = carol_.ok(approval_resolve_by_tool_call, Resolution, tool_call_id=pending[0].tool_call_id,
                         body=ApproveInputRequest(decision=ApproveDecisionEnum.APPROVE, reason="diagnosis notes only"))
    assert resolved.status_code == 202 and resolved.parsed.continuation == "scheduled"
    provider.assert_complete()

    run = alice_.ok(run_get, Run, run_id=run.id).parsed
    assert run.status == sk.models.RunStatusEnum.COMPLETED and run.outcome == "completed"
    events = alice_.ok(run_events_list, EventPage, run_id=run.id, limit=500).parsed
    assert "tool_result" in [event.kind for event in events.results]

    queue = bob_.ok(proposal_list, PaginatedProposalList, status=ProposalListStatus.PENDING).parsed
    assert queue.count == 1 and queue.results[0].run == run.id
    proposal = bob_.ok(proposal_get, ProposalDetail, proposal_id=queue.results[0].id).parsed
    assert proposal.title == PROPOSED[1]["title"] and proposal.evidence
    accepted = bob_.ok(proposal_accept, ProposalDetail, proposal_id=proposal.id, body=AcceptRequest()).parsed
    assert accepted.status == sk.models.ProposalStatusEnum.ACCEPTED and accepted.knowledge_entry

    verified = dave_.ok(audit_verify, AuditVerify).parsed
    assert verified.ok and verified.rows > 0 and verified.first_bad_seq is None
