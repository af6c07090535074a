"""The kernel's acceptance criteria on the real stack: exchanges run on the qcluster worker against a
real local HTTPS server speaking the OpenAI chat-completions SSE format (trustme certificates)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from skald.agents.seed import TROUBLESHOOTER_PROMPT, TROUBLESHOOTER_TOOLS
from tests.e2e.stack import Api, Launch, Stack, processes, wait_for, wait_ready
from tests.loop.providers.fake_openai_server import (
    TEST_SECRET,
    FakeOpenAIServer,
    RecordedRequest,
    SSEResponse,
    sse,
    text_chunks,
    tool_call_chunks,
)

# One worker runs the whole module: its module-scoped stack boots once, not once per xdist worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("stack_provider")]

KIB = 1024
TOOL_OUTPUT_CAP = 16 * KIB
MAX_TURNS = 8
# Words only: digits could be masked as phone or card numbers on their way to the provider.
BIG_LINE = "checkout worker log line: upstream timed out while reading the response header\n"
BIG = (BIG_LINE * (100 * KIB // len(BIG_LINE) + 1))[: 100 * KIB]


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(host="127.0.0.1") as fake:  # the certificate names IP 127.0.0.1
        yield fake


@pytest.fixture(scope="module")
def profile_env(fake_provider: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return fake_provider.profile_env(tmp_path_factory.mktemp("secrets"))


@pytest.fixture(scope="module")
def stack(launch_stack: Launch, profile_env: dict[str, str]) -> Stack:
    stack = launch_stack(profile_env)
    wait_ready(stack)  # exchanges need the qcluster
    return stack


def _reset(fake: FakeOpenAIServer) -> FakeOpenAIServer:
    with fake._lock:
        fake.script.clear()
        fake.requests.clear()
    fake.default = None
    fake.reset_counters()
    return fake


@pytest.fixture
def server(fake_provider: FakeOpenAIServer) -> FakeOpenAIServer:
    """The module's fake provider with an empty script and no recorded requests."""
    return _reset(fake_provider)


@pytest.fixture(scope="module")
def operator(stack: Stack) -> Api:
    return stack.api("operator")


def tool_turn(name: str, arguments: dict[str, Any], **options: Any) -> SSEResponse:
    return sse(tool_call_chunks([(f"call_{name}", name, json.dumps(arguments))]), **options)


def exchange_events(api: Api, session_id: int, exchange_id: int) -> list[dict[str, Any]]:
    return [event for event in api.events(session_id) if event["exchange"] == exchange_id]


def barrier(api: Api, server: FakeOpenAIServer, session_id: int) -> dict[str, Any]:
    """A barrier instead of a sleep: one more exchange in the session, answered with text. A
    session's exchanges run one after another, so once it settled no earlier work of the session
    is still running: a provider request or an exchange it would have made is on record by now."""
    server.default = None
    server.push(sse(text_chunks("barrier")))
    posted = api.send(session_id, "Anything else?")
    settled = api.wait_settled(session_id, posted["id"])
    assert settled["outcome"] == "completed", settled
    assert server.requests[-1].body["messages"][-1] == {"role": "user", "content": "Anything else?"}
    return settled


# --- Acceptance 1 and 2: one exchange reading a 100 KiB file, then its replay ----------------------


@pytest.fixture(scope="module")
def big_read(stack: Stack, operator: Api, fake_provider: FakeOpenAIServer) -> dict[str, Any]:
    """An exchange whose model reads a 100 KiB workspace file, then answers."""
    server = _reset(fake_provider)
    session = operator.create_session("troubleshooter")
    stack.workspace_put(session["id"], "big.txt", BIG)
    server.push(tool_turn("read_file", {"path": "big.txt"}), sse(text_chunks("The upstream ", "times out.")))
    posted = operator.send(session["id"], "Why does checkout return 502?", key="e2e-read-big")
    settled = operator.wait_settled(session["id"], posted["id"])
    return {"session": session, "posted": posted, "settled": settled, "requests": list(server.requests),
            "events": exchange_events(operator, session["id"], posted["id"])}


def test_readyz_says_configured_and_never_echoes_the_profile(stack: Stack, profile_env: dict[str, str]) -> None:
    body = wait_ready(stack)
    assert body["gdl_provider"] == "configured"
    assert body["workers"] == "ok"
    text = json.dumps(body)
    for name, value in profile_env.items():
        if name != "BRAIN_GDL_PROVIDER_MODEL":
            assert value not in text, name
    assert "m" not in body.values()
    assert str(stack.port) not in text and "provider.key" not in text


def test_the_exchange_runs_on_the_worker_with_temperature_zero_the_tools_and_the_projected_history(
    big_read: dict[str, Any],
) -> None:
    settled, requests = big_read["settled"], big_read["requests"]
    assert (settled["status"], settled["outcome"], settled["turns"]) == ("settled", "completed", 2)
    assert len(requests) == 2
    for request in requests:
        assert (request.method, request.path) == ("POST", "/v1/chat/completions")
        assert request.headers["authorization"] == f"Bearer {TEST_SECRET}"
        assert request.body["temperature"] == 0.0
        assert request.body["model"] == "m" and request.body["stream"] is True
        assert sorted(tool["function"]["name"] for tool in request.body["tools"]) == sorted(TROUBLESHOOTER_TOOLS)
    first, second = (request.body["messages"] for request in requests)
    assert first == [{"role": "system", "content": TROUBLESHOOTER_PROMPT},
                     {"role": "user", "content": "Why does checkout return 502?"}]
    # The second request is the projected history: the first, the assistant's call, its result.
    assert second[:2] == first
    call_key = next(e for e in big_read["events"] if e["kind"] == "assistant")["payload"]["tool_calls"][0]["key"]
    assistant, tool = second[2:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [{"id": call_key, "type": "function",
                                        "function": {"name": "read_file", "arguments": '{"path": "big.txt"}'}}]
    assert tool["role"] == "tool" and tool["tool_call_id"] == call_key


def test_a_100_kib_tool_output_reaches_the_next_request_truncated_to_16_kib(big_read: dict[str, Any]) -> None:
    content = big_read["requests"][1].body["messages"][-1]["content"]
    assert len(content.encode()) <= TOOL_OUTPUT_CAP
    assert len(content.encode()) > TOOL_OUTPUT_CAP - 256  # cut at the cap, not emptied
    assert content.startswith(BIG[:8 * KIB])
    assert "output truncated by Skald" in content
    stored = next(e for e in big_read["events"] if e["kind"] == "tool_result")["payload"]
    assert stored["truncated"] is True and stored["content"] == content


def test_a_replayed_idempotency_key_returns_the_same_exchange_and_sends_nothing(
    big_read: dict[str, Any], operator: Api, server: FakeOpenAIServer
) -> None:
    session_id, settled = big_read["session"]["id"], big_read["settled"]
    before = operator.events(session_id)
    replay = operator.post_message(session_id, "Why does checkout return 502?", key="e2e-read-big")
    assert replay.status_code == 202
    body = replay.json()
    assert body["id"] == settled["id"] and body["request_key"] == "e2e-read-big"
    assert body["status"] == "settled" and body["receipt"] == settled["receipt"]
    after = barrier(operator, server, session_id)
    assert len(server.requests) == 1  # the barrier's own: the replay sent nothing
    assert [e for e in operator.events(session_id) if e["exchange"] != after["id"]] == before


# --- bounds --------------------------------------------------------------------------------------------


def test_a_server_that_always_asks_for_a_tool_gets_exactly_eight_requests(
    operator: Api, server: FakeOpenAIServer
) -> None:
    def always_a_tool(request: RecordedRequest) -> SSEResponse:
        return tool_turn("search_knowledge", {"query": "checkout 502"})

    server.default = always_a_tool
    session = operator.create_session("troubleshooter")
    posted = operator.send(session["id"], "Keep searching.")
    settled = operator.wait_settled(session["id"], posted["id"], timeout=30)
    assert (settled["outcome"], settled["turns"]) == ("turn_cap_reached", MAX_TURNS)
    barrier(operator, server, session["id"])
    assert len(server.requests) == MAX_TURNS + 1  # the cap's eight, then the barrier's one
    assert all(request.body["temperature"] == 0.0 for request in server.requests)
    # The eighth call is recorded but not run: seven tools ran.
    started = [e for e in exchange_events(operator, session["id"], posted["id"]) if e["kind"] == "control:tool_intent"]
    assert len(started) == MAX_TURNS - 1


# --- Acceptance 3: a stop through the web process ----------------------------------------------------


def test_a_stop_through_the_web_process_cancels_a_running_exchange_within_a_second(
    operator: Api, server: FakeOpenAIServer
) -> None:
    release = threading.Event()
    server.push(
        tool_turn("search_knowledge", {"query": "checkout"}),
        # A model whose turn ends in a tool call only when the test releases it: the stop must cut
        # the stream mid-turn (a stop that waited for the turn to end would never settle), and the
        # call must never be dispatched.
        tool_turn("search_knowledge", {"query": "this call must never run"}, hold=release),
    )
    session = operator.create_session("troubleshooter")
    posted = operator.send(session["id"], "Investigate slowly.")
    assert server.holding.wait(20), "the second provider stream never started"

    stopped = operator.client.post(f"/api/sessions/{session['id']}/stop/")
    assert stopped.status_code == 202 and stopped.json()["id"] == posted["id"]
    # How fast is `make bench`'s to measure; here the bound is a count: after the stop, no provider
    # call, no tool dispatch and no chunk of the held turn (the timeout only guards against a hang).
    settled = operator.wait_settled(session["id"], posted["id"], timeout=10)
    assert settled["outcome"] == "canceled"
    assert server.client_gone.wait(10), "the provider stream was not dropped"
    release.set()  # too late: the connection is gone, the held tool call can no longer arrive
    sent = server.chunks_sent

    barrier(operator, server, session["id"])
    assert len(server.requests) == 3  # turn 1, the held turn, then the barrier's: nothing after the stop
    assert server.chunks_sent == sent + len(text_chunks("barrier"))  # the held turn's last chunk never went out
    events = exchange_events(operator, session["id"], posted["id"])
    canceled = [event["seq"] for event in events if event["kind"] == "canceled"]
    assert len(canceled) == 1
    dispatched = [e for e in events if e["kind"] == "control:tool_intent"]
    assert [e["payload"]["key"].split(":")[1] for e in dispatched] == ["t1"]  # turn 1's call only
    tool_rows = [e for e in events if e["kind"] in {"control:tool_intent", "tool_result", "control:tool_done"}]
    assert len(tool_rows) == 3 and all(e["seq"] < canceled[0] for e in tool_rows)


# --- Acceptance 4: a websocket that drops mid-run and resumes with after= ------------------------------


def _durable(raw: str | bytes) -> dict[str, Any] | None:
    message = json.loads(raw)
    return message if "seq" in message else None  # live deltas carry no seq


async def _receive(ws: ClientConnection, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while len(got) < count:
            if (event := _durable(await ws.recv())) is not None:
                got.append(event)
    return got


async def _receive_until_settled(ws: ClientConnection, api: Api, session_id: int, exchange_id: int,
                                 timeout: float = 20.0) -> list[dict[str, Any]]:
    """Everything until the exchange settled and its last event arrived, then 1 s more (duplicates)."""
    got: list[dict[str, Any]] = []
    last_seq: int | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while last_seq is None or not got or got[-1]["seq"] < last_seq:
        assert loop.time() < deadline, "the exchange did not settle over the websocket"
        try:
            if (event := _durable(await asyncio.wait_for(ws.recv(), 0.3))) is not None:
                got.append(event)
        except TimeoutError:
            pass
        if last_seq is None:
            row = await asyncio.to_thread(api.exchange, session_id, exchange_id)
            if row["status"] == "settled":
                last_seq = row["receipt"]["last_seq"]
    try:
        while True:
            if (event := _durable(await asyncio.wait_for(ws.recv(), 1.0))) is not None:
                got.append(event)
    except TimeoutError:
        return got


def test_a_websocket_client_that_reconnects_with_after_gets_every_event_once_in_order(
    stack: Stack, operator: Api, server: FakeOpenAIServer
) -> None:
    server.push(
        tool_turn("search_knowledge", {"query": "checkout"}, headers_delay=0.3),
        tool_turn("scratchpad_set", {"key": "finding", "value": "pool exhausted"}, headers_delay=0.6),
        tool_turn("scratchpad_get", {"key": "finding"}, headers_delay=0.6),
        sse(text_chunks("The database ", "pool is exhausted."), delay=0.05),
    )
    session = operator.create_session("troubleshooter")
    token = stack.token("operator")
    url = f"{stack.ws_url}/ws/sessions/{session['id']}/?token={token}&after="

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        async with connect(url + "0", origin=Origin(stack.base_url)) as ws:
            posted = await asyncio.to_thread(operator.send, session["id"], "Find the cause.")
            before = await _receive(ws, 3)  # the user message, the first call, its intent
        # Disconnected mid-run: the worker goes on writing events nobody receives.
        await asyncio.to_thread(wait_for, lambda: len(server.requests) >= 3, timeout=20, what="turn 3")
        async with connect(url + str(before[-1]["seq"]), origin=Origin(stack.base_url)) as ws:
            after = await _receive_until_settled(ws, operator, session["id"], posted["id"])
        return before, after, posted["id"]

    before, after, exchange_id = asyncio.run(scenario())
    assert operator.exchange(session["id"], exchange_id)["outcome"] == "completed"
    stored = operator.events(session["id"])
    assert len(stored) > len(before) + 4  # events happened while the client was away
    received = before + after
    assert [e["seq"] for e in received] == [e["seq"] for e in stored]  # each once, in order
    assert [(e["kind"], e["payload"]) for e in received] == [(e["kind"], e["payload"]) for e in stored]


def test_a_websocket_from_a_foreign_origin_is_refused(stack: Stack, operator: Api) -> None:
    session = operator.create_session("troubleshooter")
    url = f"{stack.ws_url}/ws/sessions/{session['id']}/?token={stack.token('operator')}"

    async def attempt() -> None:
        async with connect(url, origin=Origin("http://evil.example")):
            pass

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(attempt())
    assert refused.value.response.status_code == 403


# --- a partial profile -----------------------------------------------------------------------------------


def test_a_partial_provider_profile_refuses_to_boot(launch_stack: Launch) -> None:
    stack = launch_stack({"BRAIN_GDL_PROVIDER_BASE_URL": "https://127.0.0.1:9/v1"}, wait=False)
    code = stack.process.wait(timeout=30)
    log = stack.log()
    assert code != 0, log
    assert "skald.E001" in log and "BRAIN_GDL_PROVIDER_MODEL" in log
    assert "https://127.0.0.1:9/v1" not in log  # names variables, never values
    assert "Skald is running" not in log
    left = [proc for proc in processes()
            if proc.sid == stack.process.pid or f"-p {stack.port} " in f"{proc.cmdline} "]
    assert not left, [proc.cmdline for proc in left]
