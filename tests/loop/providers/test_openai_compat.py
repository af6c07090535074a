"""The OpenAI-compatible adapter against a real local HTTPS server speaking the SSE wire format."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loop.cancellation import CancelToken
from loop.errors import ProviderError
from loop.providers.base import (
    AssistantMessage,
    Delta,
    LlmProvider,
    MessageEnd,
    ProviderRequest,
    SummaryMessage,
    TextDelta,
    ToolCallDelta,
    ToolCallRequest,
    ToolResultMessage,
    ToolSpec,
    UsageDelta,
    UserMessage,
    fold_deltas,
)
from loop.providers.openai_compat import OpenAICompatProvider
from loop.providers.profile import ProviderProfile
from tests.loop.providers.fake_openai_server import (
    TEST_SECRET,
    FakeOpenAIServer,
    FakeResolver,
    RecordedRequest,
    StatusResponse,
    chunk,
    sse,
    text_chunks,
    tool_call_chunks,
    usage_chunk,
)

MakeProvider = Callable[..., OpenAICompatProvider]

HELLO = ProviderRequest(system="You are terse.", messages=(UserMessage("hello"),))
LOOKUP = ToolSpec(
    name="lookup",
    description="Look a ticket up.",
    parameters={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
)


def run(provider: OpenAICompatProvider, request: ProviderRequest = HELLO) -> list[Delta]:
    return list(provider.stream(request, cancel=CancelToken()))


def provider_error(provider: OpenAICompatProvider, request: ProviderRequest = HELLO) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        run(provider, request)
    text = f"{caught.value} {caught.value!r} {caught.value.args}"
    assert TEST_SECRET not in text
    return caught.value


def _echo_authorization(status: int) -> Callable[[RecordedRequest], StatusResponse]:
    def answer(request: RecordedRequest) -> StatusResponse:
        return StatusResponse(status, {"error": {"message": f"bad key {request.headers['authorization']}"}})

    return answer


# --- the happy paths ----------------------------------------------------------------------------------


def test_it_is_an_llm_provider_whose_repr_hides_everything(make_provider: MakeProvider) -> None:
    provider = make_provider()
    assert isinstance(provider, LlmProvider)
    assert provider.name == "openai_compat"
    assert repr(provider) == "OpenAICompatProvider(name='openai_compat')"


def test_it_streams_text(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse(text_chunks("Hel", "lo", ", world")))
    assert run(make_provider()) == [
        TextDelta("Hel"),
        TextDelta("lo"),
        TextDelta(", world"),
        UsageDelta(input_tokens=11, output_tokens=7),
        MessageEnd("stop"),
    ]


def test_it_streams_tool_call_arguments_split_across_many_chunks(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    first = '{"id": "TICKET-42", "verbose": true}'
    second = '{"id": "TICKET-7"}'
    server.push(sse(tool_call_chunks([("call_a", "lookup", first), ("call_b", "lookup", second)], split=2)))
    deltas = run(make_provider())
    fragments = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert len(fragments) > 20
    assert fragments[0] == ToolCallDelta(index=0, id="call_a", name="lookup")
    turn = fold_deltas(deltas)
    assert turn.tool_calls == [
        ToolCallRequest(id="call_a", name="lookup", arguments=first),
        ToolCallRequest(id="call_b", name="lookup", arguments=second),
    ]
    assert turn.finish_reason == "tool_calls"
    assert (turn.input_tokens, turn.output_tokens) == (20, 9)


def test_usage_from_the_final_chunk_comes_before_the_end(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse([chunk({"content": "ok"}), chunk({}, finish_reason="length"), usage_chunk(300, 4096)]))
    assert run(make_provider())[-2:] == [UsageDelta(300, 4096), MessageEnd("length")]


def test_cumulative_usage_on_every_chunk_is_reported_once(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(
        sse(
            [
                chunk({"content": "a"}, usage={"prompt_tokens": 5, "completion_tokens": 1}),
                chunk({"content": "b"}, usage={"prompt_tokens": 5, "completion_tokens": 2}),
                chunk({}, finish_reason="stop", usage={"prompt_tokens": 5, "completion_tokens": 2}),
            ]
        )
    )
    turn = fold_deltas(run(make_provider()))
    assert (turn.text, turn.input_tokens, turn.output_tokens) == ("ab", 5, 2)


def test_a_stream_without_a_finish_reason_has_no_message_end(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(sse([chunk({"content": "half"}), usage_chunk(1, 1)]))
    deltas = run(make_provider())
    assert not any(isinstance(d, MessageEnd) for d in deltas)


def test_every_request_carries_the_contract_tools_and_messages(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(sse(text_chunks("one")), sse(text_chunks("two")))
    history = (
        UserMessage("find ticket 42"),
        AssistantMessage("", tool_calls=(ToolCallRequest("e1:t1:c0", "lookup", '{"id": "42"}'),)),
        ToolResultMessage(call_id="e1:t1:c0", name="lookup", content="ticket 42: printer on fire"),
        SummaryMessage(kind="delegation", content="the child found the printer"),
        SummaryMessage(kind="compaction", content="earlier: greetings"),
        AssistantMessage("It is on fire."),
        UserMessage("thanks"),
    )
    request = ProviderRequest(
        system="You are terse.", messages=history, tools=(LOOKUP,), model="caller-picked", max_output_tokens=256
    )
    provider = make_provider()
    run(provider, request)
    run(provider, HELLO)

    first, second = server.requests
    assert first.method == "POST" and first.path == "/v1/chat/completions"
    assert first.body == {
        "model": "skald-test-model",  # server-owned: the caller's model is ignored
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "find ticket 42"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "e1:t1:c0", "type": "function", "function": {"name": "lookup", "arguments": '{"id": "42"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "e1:t1:c0", "content": "ticket 42: printer on fire"},
            {"role": "user", "content": "[delegation summary]\nthe child found the printer"},
            {"role": "user", "content": "[compaction summary]\nearlier: greetings"},
            {"role": "assistant", "content": "It is on fire."},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "lookup", "description": "Look a ticket up.", "parameters": LOOKUP.parameters},
            }
        ],
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 256,
    }
    assert second.body["temperature"] == 0.0 and "tools" not in second.body
    for received in server.requests:
        assert received.headers["authorization"] == f"Bearer {TEST_SECRET}"
        assert received.headers["host"] == f"localhost:{server.port}"
        assert received.headers["accept"] == "text/event-stream"
        assert received.sni == "localhost"


def test_the_secret_never_reaches_a_log_line(
    server: FakeOpenAIServer, make_provider: MakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    server.push(sse(text_chunks("logged")), _echo_authorization(401))
    with caplog.at_level(logging.DEBUG):
        run(make_provider())
        provider_error(make_provider())
    assert caplog.records, "httpx/httpcore debug logging was expected to be captured"
    assert TEST_SECRET not in caplog.text


def test_the_secret_is_read_at_call_time(
    server: FakeOpenAIServer, make_provider: MakeProvider, secret_root: Path
) -> None:
    server.push(sse(text_chunks("a")), sse(text_chunks("b")))
    provider = make_provider()
    run(provider)
    (secret_root / "provider.key").write_text("sk-rotated-key\n")
    run(provider)
    assert [r.headers["authorization"] for r in server.requests] == [
        f"Bearer {TEST_SECRET}",
        "Bearer sk-rotated-key",
    ]


def test_it_reaches_an_ipv6_server(secret_root: Path) -> None:
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with FakeOpenAIServer([sse(text_chunks("six"))], bind="::1") as server:
        provider = OpenAICompatProvider(
            _profile(server, secret_root, allow=("::1/128",)),
            resolver=FakeResolver({"localhost": ["::1"]}),
            timeout=5,
        )
        assert fold_deltas(run(provider)).text == "six"


def _profile(server: FakeOpenAIServer, root: Path, *, allow: tuple[str, ...]) -> ProviderProfile:
    return ProviderProfile(
        base_url=server.base_url,
        model="m",
        secret_file="provider.key",
        secret_root=str(root),
        allow_cidrs=tuple(ipaddress.ip_network(cidr) for cidr in allow),
        ca_file=server.ca_file,
    )


# --- refusals before anything is sent -----------------------------------------------------------------


@pytest.mark.parametrize("temperature", [None, 0.7, 1.0, 1e-9])
def test_a_request_without_temperature_zero_is_refused_before_sending(
    temperature: float | None, server: FakeOpenAIServer, make_provider: MakeProvider, resolver: FakeResolver
) -> None:
    request = ProviderRequest(system="", messages=(UserMessage("hi"),), temperature=temperature)
    with pytest.raises(ProviderError) as caught:
        make_provider().stream(request, cancel=CancelToken())
    assert caught.value.code == "provider_sampling_contract"
    assert server.requests == [] and resolver.calls == []


def test_a_loopback_endpoint_without_an_allow_list_is_refused(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    assert provider_error(make_provider(allow_cidrs=())).code == "provider_ssrf_refused"
    assert server.requests == []


def test_an_already_cancelled_token_sends_nothing(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(ProviderError) as caught:
        list(make_provider().stream(HELLO, cancel=token))
    assert caught.value.code == "provider_canceled"
    assert server.requests == []


def test_a_broken_secret_refuses_before_connecting(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    assert provider_error(make_provider(secret_file="../escape.key")).code == "provider_secret_invalid"
    assert server.requests == []


# --- HTTP and protocol failures -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 401, 429])
def test_a_non_2xx_status_is_reported_with_the_secret_scrubbed(
    status: int, server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(_echo_authorization(status))
    error = provider_error(make_provider())
    assert error.code == "provider_http_status"
    assert f"HTTP {status}" in str(error)
    assert "bad key Bearer [redacted]" in str(error)


def test_the_error_excerpt_is_bounded_and_scrubs_a_cut_secret(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    filler = "x" * 180
    server.push(StatusResponse(503, f"{filler} {TEST_SECRET}" * 3, {"Content-Type": "text/plain"}))
    error = provider_error(make_provider())
    excerpt = str(error).split(": ", 1)[1]
    assert len(excerpt) <= 200 + len("[redacted]")
    assert TEST_SECRET[:6] not in str(error)


def test_a_redirect_is_refused(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    with FakeOpenAIServer([sse(text_chunks("followed"))]) as target:
        server.push(StatusResponse(307, headers={"Location": f"{target.base_url}/chat/completions"}))
        assert provider_error(make_provider()).code == "provider_redirect_refused"
        assert target.requests == []


@pytest.mark.parametrize(
    "payload", ["{not json", "[1, 2]", '{"choices": "nope"}', '{"choices": [{"delta": {"content": 7}}]}']
)
def test_a_malformed_chunk_is_a_protocol_error(
    payload: str, server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(sse([chunk({"content": "fine"}), payload]))
    assert provider_error(make_provider()).code == "provider_protocol"


def test_a_non_stream_answer_is_a_protocol_error(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(StatusResponse(200, {"choices": [{"message": {"content": "not streamed"}}]}))
    assert provider_error(make_provider()).code == "provider_protocol"


def test_an_error_event_mid_stream_is_reported(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse([chunk({"content": "par"}), {"error": {"message": "overloaded", "type": "server_error"}}]))
    error = provider_error(make_provider())
    assert error.code == "provider_upstream_error" and "overloaded" in str(error)


def test_a_dropped_connection_mid_stream_is_a_transport_error(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(sse(text_chunks("one", "two", "three"), drop_after=3))
    received: list[Delta] = []
    with pytest.raises(ProviderError) as caught:
        for delta in make_provider().stream(HELLO, cancel=CancelToken()):
            received.append(delta)
    assert caught.value.code == "provider_transport"
    assert received == [TextDelta("one"), TextDelta("two")]


def test_a_stream_that_ends_before_done_is_a_transport_error(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(sse(text_chunks("cut"), done=False))
    assert provider_error(make_provider()).code == "provider_transport"


def test_a_read_timeout_is_a_transport_error(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse(text_chunks("late"), headers_delay=30))
    assert provider_error(make_provider(timeout=0.3)).code == "provider_transport"
    assert server.stalled.is_set() and server.headers_sent == 0  # it gave up while the server still waited


def test_a_closed_port_is_a_transport_error(make_provider: MakeProvider) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert provider_error(make_provider(base_url=f"https://localhost:{port}/v1")).code == "provider_transport"


# --- egress hygiene: proxies and certificates -----------------------------------------------------------


def test_proxy_environment_variables_are_ignored(
    server: FakeOpenAIServer, make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent/ca.pem")
    server.push(sse(text_chunks("direct")))
    assert fold_deltas(run(make_provider())).text == "direct"


def test_a_certificate_for_another_host_is_refused(secret_root: Path) -> None:
    with FakeOpenAIServer([sse(text_chunks("mitm"))], cert_hosts=("wrong.example",)) as server:
        provider = OpenAICompatProvider(
            _profile(server, secret_root, allow=("127.0.0.1/32",)),
            resolver=FakeResolver({"localhost": ["127.0.0.1"]}),
            timeout=5,
        )
        error = provider_error(provider)
        assert error.code == "provider_tls"
        assert server.requests == []


def test_the_certificate_is_checked_against_the_hostname_not_the_pinned_ip(secret_root: Path) -> None:
    # The certificate is valid for the address we connect to, but not for the name in the URL.
    with FakeOpenAIServer([sse(text_chunks("mitm"))], cert_hosts=("127.0.0.1",)) as server:
        provider = OpenAICompatProvider(
            _profile(server, secret_root, allow=("127.0.0.1/32",)),
            resolver=FakeResolver({"localhost": ["127.0.0.1"]}),
            timeout=5,
        )
        assert provider_error(provider).code == "provider_tls"
        assert server.requests == []


def test_an_untrusted_ca_is_refused(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse(text_chunks("mitm")))
    assert provider_error(make_provider(ca_file=None)).code == "provider_tls"
    assert server.requests == []


# --- cancellation and dropping the stream ---------------------------------------------------------------


def _cancel_when(token: CancelToken, event: threading.Event) -> None:
    """Cancel from another thread once ``event`` is set (the server has started its long wait)."""

    def cancel() -> None:
        if event.wait(30):
            token.cancel()

    threading.Thread(target=cancel, daemon=True).start()


def test_cancelling_a_slow_stream_returns_promptly(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse(text_chunks("first", "never"), delay=[0, 0, 30]))
    token = CancelToken()
    stream = make_provider(timeout=60).stream(HELLO, cancel=token)
    assert next(stream) == TextDelta("first")
    _cancel_when(token, server.stalled)
    with pytest.raises(ProviderError) as caught:
        next(stream)
    assert caught.value.code == "provider_canceled"
    # Promptly: back before the server sent its next chunk (it waits 30 s), not after the stream's end.
    assert server.chunks_sent == 2  # the role chunk and "first"; "never" was not sent


def test_cancelling_while_waiting_for_headers_returns_promptly(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.push(sse(text_chunks("late"), headers_delay=30))
    token = CancelToken()
    _cancel_when(token, server.stalled)
    with pytest.raises(ProviderError) as caught:
        list(make_provider(timeout=60).stream(HELLO, cancel=token))
    assert caught.value.code == "provider_canceled"
    assert server.headers_sent == 0  # back while the server still held its headers (30 s)


def _text(provider: OpenAICompatProvider) -> Delta:
    """One whole call (read to its end, so its connection is free for the next); its first delta."""
    deltas = list(provider.stream(HELLO, cancel=CancelToken()))
    return deltas[0]


def test_model_calls_to_one_provider_keep_one_connection_alive(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.keep_alive = True  # as a real provider does
    provider = make_provider()
    for answer in ("one", "two", "three"):
        server.push(sse(text_chunks(answer)))
        assert _text(provider) == TextDelta(answer)
    # One TCP connection and one TLS handshake for three calls, and each call's request arrived whole.
    assert server.connections == 1
    assert len(server.requests) == 3 and all(r.sni == "localhost" for r in server.requests)


def test_cancelling_while_waiting_for_headers_on_a_kept_alive_connection_returns_promptly(
    server: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    server.keep_alive = True
    provider = make_provider(timeout=60)
    server.push(sse(text_chunks("first")))
    assert _text(provider) == TextDelta("first")
    server.push(sse(text_chunks("late"), headers_delay=30))
    token = CancelToken()
    _cancel_when(token, server.stalled)
    with pytest.raises(ProviderError) as caught:
        list(provider.stream(HELLO, cancel=token))
    assert caught.value.code == "provider_canceled"
    assert server.connections == 1  # the second call went over the first call's connection
    assert server.headers_sent == 1  # back while the server still held the second call's headers (30 s)
    server.push(sse(text_chunks("after")))  # the broken connection is not reused: the next call works
    assert _text(provider) == TextDelta("after")


def test_closing_the_stream_closes_the_connection(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse(text_chunks(*[f"piece {n} " for n in range(200)]), delay=0.02))
    stream: Iterator[Delta] = make_provider().stream(HELLO, cancel=CancelToken())
    assert next(stream) == TextDelta("piece 0 ")
    stream.close()  # type: ignore[attr-defined]
    assert server.client_gone.wait(2.0), "the server kept writing to an open connection"


def test_a_cancel_after_the_stream_finished_is_harmless(server: FakeOpenAIServer, make_provider: MakeProvider) -> None:
    server.push(sse(text_chunks("done")))
    token = CancelToken()
    deltas = list(make_provider().stream(HELLO, cancel=token))
    token.cancel()
    assert deltas[-1] == MessageEnd("stop")
