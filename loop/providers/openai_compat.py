"""The OpenAI-compatible HTTP adapter (SPEC L7): the kernel's one real egress.

One request per call: HTTPS only, the host resolved and SSRF-screened once and the connection pinned
to that address (TLS SNI, certificate check and ``Host`` stay on the real hostname), no proxies from
the environment, no redirects, no retries, the key read from its root-confined file at call time,
and ``temperature: 0.0`` on every request (refused before the send otherwise).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any, TypeGuard

import httpx

from loop import tracing
from loop.cancellation import CancelToken
from loop.errors import ProviderError
from loop.providers import connections
from loop.providers.base import (
    AssistantMessage,
    Delta,
    Message,
    MessageEnd,
    ProviderRequest,
    SummaryMessage,
    TextDelta,
    ToolCallDelta,
    ToolResultMessage,
    UsageDelta,
    UserMessage,
)
from loop.providers.guarded_http import ssl_context
from loop.providers.netguard import Resolver, SystemResolver, parse_endpoint, resolve_and_screen
from loop.providers.profile import ProviderProfile, read_secret

DRAIN_SECONDS = 0.5  # what a server may take after [DONE] to end its chunked body
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=10.0)
MAX_LINE_BYTES = 1024 * 1024
ERROR_BODY_BYTES = 2048
EXCERPT_CHARS = 200
_SCRUBBED = "[redacted]"


def _error(message: str, code: str, secret: str = "") -> ProviderError:
    return ProviderError(_scrub(message, secret), code=code)


def _scrub(text: str, secret: str) -> str:
    """Remove the secret, including a truncated copy at the very end of ``text``."""
    if not secret:
        return text
    text = text.replace(secret, _SCRUBBED)
    for size in range(min(len(secret) - 1, len(text)), 3, -1):
        if text.endswith(secret[:size]):
            return text[:-size] + _SCRUBBED
    return text


def _canceled() -> ProviderError:
    return ProviderError("provider call canceled", code="provider_canceled")


# --- request body -----------------------------------------------------------------------------


def build_body(request: ProviderRequest, model: str) -> dict[str, Any]:
    """The chat-completions JSON body. The model is always the profile's (server-owned)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_wire_message(message) for message in request.messages)
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in request.tools
        ]
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    return body


def _wire_message(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, AssistantMessage):
        wire: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            wire["content"] = message.content or None
            wire["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in message.tool_calls
            ]
        return wire
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if isinstance(message, SummaryMessage):
        return {"role": "user", "content": f"[{message.kind} summary]\n{message.content}"}
    raise ProviderError(f"unsupported message type {type(message).__name__}", code="provider_request_invalid")


# --- the stream: SSE framing and chunk decoding -----------------------------------------------


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            yield _decode_line(bytes(buffer[:end]))
            del buffer[: end + 1]
        if len(buffer) > MAX_LINE_BYTES:
            raise ProviderError("stream line exceeds 1 MiB", code="provider_protocol")
    if buffer:
        yield _decode_line(bytes(buffer))


def _decode_line(raw: bytes) -> str:
    try:
        return raw.rstrip(b"\r").decode("utf-8")
    except UnicodeDecodeError:
        raise ProviderError("stream is not valid UTF-8", code="provider_protocol") from None


def sse_events(lines: Iterator[str]) -> Iterator[str]:
    """Yield the ``data`` payload of each server-sent event (multi-line data joined by ``\\n``)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue  # a comment / keep-alive
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:  # lenient: a server that closes right after its last data line
        yield "\n".join(data)


class _Turn:
    """What the stream has announced so far that is only emitted at ``[DONE]``."""

    __slots__ = ("finish_reason", "usage")

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.usage: UsageDelta | None = None


def decode_chunk(data: str, turn: _Turn, secret: str = "") -> list[Delta]:
    """Decode one ``chat.completion.chunk``; text and tool fragments now, usage/finish later."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ProviderError("malformed JSON chunk in the stream", code="provider_protocol") from None
    if not isinstance(chunk, dict):
        raise ProviderError("stream chunk is not a JSON object", code="provider_protocol")
    if chunk.get("error") is not None:
        detail = chunk["error"].get("message", "") if isinstance(chunk["error"], dict) else chunk["error"]
        excerpt = " ".join(str(detail).split())[:EXCERPT_CHARS]
        raise _error(f"provider reported an error mid-stream: {excerpt}", "provider_upstream_error", secret)
    usage = chunk.get("usage")
    if usage is not None:
        # Kept, not emitted: some servers repeat cumulative usage on every chunk.
        turn.usage = _usage(usage)
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise ProviderError("stream chunk has malformed choices", code="provider_protocol")
    deltas: list[Delta] = []
    for choice in choices:
        if choice.get("index", 0) != 0:
            continue  # we never ask for n > 1
        deltas.extend(_choice_deltas(choice))
        finish = choice.get("finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                raise ProviderError("finish_reason is not a string", code="provider_protocol")
            turn.finish_reason = finish
    return deltas


def _usage(usage: Any) -> UsageDelta:
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if _count(prompt) and _count(completion):
            return UsageDelta(input_tokens=prompt, output_tokens=completion)
    raise ProviderError("usage lacks integer prompt_tokens/completion_tokens", code="provider_protocol")


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _choice_deltas(choice: dict[str, Any]) -> Iterator[Delta]:
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise ProviderError("choice delta is not an object", code="provider_protocol")
    content = delta.get("content")
    if content is not None and not isinstance(content, str):
        raise ProviderError("delta content is not a string", code="provider_protocol")
    if content:
        yield TextDelta(text=content)
    fragments = delta.get("tool_calls") or []
    if not isinstance(fragments, list):
        raise ProviderError("delta tool_calls is not a list", code="provider_protocol")
    for position, fragment in enumerate(fragments):
        yield from _tool_fragment(position, fragment)


def _tool_fragment(position: int, fragment: Any) -> Iterator[ToolCallDelta]:
    if not isinstance(fragment, dict):
        raise ProviderError("tool call fragment is not an object", code="provider_protocol")
    index = fragment.get("index", position)
    function = fragment.get("function") or {}
    if not _count(index) or not isinstance(function, dict):
        raise ProviderError("tool call fragment is malformed", code="provider_protocol")
    call_id, name, arguments = fragment.get("id"), function.get("name"), function.get("arguments")
    if any(v is not None and not isinstance(v, str) for v in (call_id, name, arguments)):
        raise ProviderError("tool call fragment fields must be strings", code="provider_protocol")
    if call_id or name or arguments:
        yield ToolCallDelta(index=index, id=call_id or None, name=name or None, arguments=arguments or "")


# --- cancellation: wake a blocked read ----------------------------------------------------------


class _SocketBreaker:
    """Shuts the connection's socket down when the token is cancelled.

    ``shutdown`` (unlike ``close``) wakes a ``recv`` blocked in another thread, and touching only the
    socket keeps httpx's own state single-threaded: the streaming thread then sees EOF, raises, and
    closes the response itself. The connection's streams hand their socket over as the request
    writes and reads (a kept-alive connection too), so a cancel also interrupts a wait for response
    headers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._fired = False

    def attach(self, sock: socket.socket | None) -> None:
        """The request's connection, new or kept alive (:func:`loop.providers.connections.capturing`)."""
        if sock is None or sock is self._sock:
            return
        with self._lock:
            self._sock = sock
            fired = self._fired
        if fired:
            _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            self._fired = True
            sock = self._sock
        _shutdown(sock)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        # The plain-socket method: SSLSocket.shutdown would also tear down SSL state under the reader.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


# --- the provider ---------------------------------------------------------------------------------


class OpenAICompatProvider:
    """Streams chat completions from an OpenAI-compatible server.

    Args:
        profile: the server-owned destination, model, secret location and trust settings.
        resolver: DNS for the SSRF screen; tests inject a scripted one.
        timeout: httpx timeouts (connect / per-read / write / pool).
    """

    name = "openai_compat"

    def __init__(
        self,
        profile: ProviderProfile,
        *,
        resolver: Resolver | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    ) -> None:
        self._profile = profile
        self._endpoint = parse_endpoint(profile.base_url)
        self._resolver = resolver if resolver is not None else SystemResolver()
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)

    def __repr__(self) -> str:
        return f"OpenAICompatProvider(name={self.name!r})"

    @property
    def model(self) -> str:
        """The model every request asks for (the profile's)."""
        return self._profile.model

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        """Stream one assistant turn.

        The sampling contract is checked here, before anything is sent; the connection opens on the
        first ``next()``. Closing the returned iterator closes the response.

        Raises:
            ProviderError: ``provider_sampling_contract`` at once; later ``provider_ssrf_refused``,
                ``provider_url_invalid``, ``provider_dns_failed``, ``provider_secret_invalid``,
                ``provider_tls``, ``provider_transport``, ``provider_http_status``,
                ``provider_redirect_refused``, ``provider_protocol``, ``provider_upstream_error``
                or ``provider_canceled``.
        """
        if request.temperature is None or request.temperature != 0.0:
            raise ProviderError(
                "the sampling contract requires temperature 0.0; refusing to send",
                code="provider_sampling_contract",
            )
        try:
            body = json.dumps(build_body(request, self._profile.model), allow_nan=False).encode()
        except (TypeError, ValueError):
            raise ProviderError("request is not JSON-serialisable", code="provider_request_invalid") from None
        return self._stream(body, cancel)

    def _stream(self, body: bytes, cancel: CancelToken) -> Iterator[Delta]:
        if cancel.cancelled:
            raise _canceled()
        secret = read_secret(self._profile)
        endpoint = self._endpoint
        pinned = resolve_and_screen(endpoint.host, endpoint.port, self._resolver, self._profile.allow_cidrs)
        client = connections.client_for(pinned, endpoint.port, endpoint.host, self._profile.ca_file or "",
                                        self._ssl_context(), self._timeout)
        breaker = _SocketBreaker()
        unregister = cancel.on_cancel(breaker.fire)
        response: httpx.Response | None = None
        try:
            request = client.build_request(
                "POST",
                self._pinned_url(pinned),
                content=body,
                headers=self._headers(secret),
                # Connect to the pinned IP while TLS (SNI + hostname check) uses the real host.
                extensions={"sni_hostname": endpoint.host},
            )
            try:
                with connections.capturing(breaker):
                    response = client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise _transport_error(exc, cancel, secret) from None
            if cancel.cancelled:
                raise _canceled()
            _check_response(response, secret)
            yield from _deltas(response, cancel, secret)
        finally:
            unregister()
            if response is not None:
                response.close()  # a response read to its end leaves its connection to the next call

    def _pinned_url(self, pinned: str) -> str:
        shown = f"[{pinned}]" if isinstance(ipaddress.ip_address(pinned), ipaddress.IPv6Address) else pinned
        return f"https://{shown}:{self._endpoint.port}{self._endpoint.path}/chat/completions"

    def _headers(self, secret: str) -> dict[str, str]:
        headers = {
            "Host": self._endpoint.host_header,
            "Authorization": f"Bearer {secret}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",  # compressed SSE would be buffered, not streamed
            "User-Agent": "skald-openai-compat/1",
        }
        if tracing.enabled and (traceparent := tracing.tracer.traceparent()):
            headers["traceparent"] = traceparent  # the provider's own spans join the turn's trace
        return headers

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl_context(self._profile.ca_file or "")


def _drain(events: Iterator[str]) -> None:
    """Read what follows ``[DONE]`` (the chunked body's last chunk), so the connection is left whole
    for the next call (:mod:`loop.providers.connections`). A server that keeps the stream open after
    ``[DONE]`` gets :data:`DRAIN_SECONDS` a read; then the read times out and its connection is
    dropped, not reused."""
    try:
        with connections.reads_within(DRAIN_SECONDS):
            for _ in events:
                pass
    except httpx.HTTPError:
        pass  # the answer is complete; the connection is simply not kept


def _check_response(response: httpx.Response, secret: str) -> None:
    status = response.status_code
    if 300 <= status < 400:
        raise ProviderError(
            f"provider answered a redirect (HTTP {status}); redirects are refused",
            code="provider_redirect_refused",
        )
    if not 200 <= status < 300:
        raise _error(f"provider answered HTTP {status}: {_excerpt(response)}", "provider_http_status", secret)
    content_type = response.headers.get("content-type", "")
    if not content_type.lower().startswith("text/event-stream"):
        raise ProviderError("provider did not answer with an event stream", code="provider_protocol")


def _excerpt(response: httpx.Response) -> str:
    raw = bytearray()
    try:
        for chunk in response.iter_bytes():
            raw += chunk
            if len(raw) >= ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        pass  # the status is the news; a body we cannot read is not
    return " ".join(raw[:ERROR_BODY_BYTES].decode("utf-8", "replace").split())[:EXCERPT_CHARS]


def _deltas(response: httpx.Response, cancel: CancelToken, secret: str) -> Iterator[Delta]:
    turn = _Turn()
    done = False
    try:
        events = sse_events(_lines(response.iter_bytes()))
        for data in events:
            if cancel.cancelled:
                raise _canceled()
            if data.strip() == "[DONE]":
                done = True
                break
            yield from decode_chunk(data, turn, secret)
    except httpx.HTTPError as exc:
        raise _transport_error(exc, cancel, secret) from None
    if done:
        _drain(events)
    if cancel.cancelled:
        raise _canceled()
    if not done:
        raise ProviderError("the stream ended before [DONE]", code="provider_transport")
    if turn.usage is not None:
        yield turn.usage
    if turn.finish_reason is not None:
        yield MessageEnd(finish_reason=turn.finish_reason)


def _transport_error(exc: httpx.HTTPError, cancel: CancelToken, secret: str) -> ProviderError:
    if cancel.cancelled:
        return _canceled()
    detail = " ".join(str(exc).split())[:EXCERPT_CHARS]
    if _has_ssl_cause(exc):
        return _error(f"TLS with the provider failed: {detail}", "provider_tls", secret)
    if isinstance(exc, httpx.TimeoutException):
        return _error(f"provider timed out ({type(exc).__name__})", "provider_transport", secret)
    return _error(f"provider transport failed ({type(exc).__name__}): {detail}", "provider_transport", secret)


def _has_ssl_cause(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError) and not isinstance(
            seen, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
