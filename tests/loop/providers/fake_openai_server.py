"""A real local HTTPS server speaking the OpenAI chat-completions SSE wire format, for tests.

Usage::

    with FakeOpenAIServer([sse(text_chunks("hello"))]) as server:
        profile = ProviderProfile(base_url=server.base_url, ..., ca_file=server.ca_file)
        ...
        assert server.requests[0].body["temperature"] == 0.0

The script is consumed one entry per request; an entry is a response value or a callable taking
the :class:`RecordedRequest` and returning one. ``default`` answers once the script is empty (e.g.
``FakeOpenAIServer(default=lambda req: sse(tool_call_chunks([...])))`` for "a server that always
asks for a tool"). The certificate comes from a throw-away ``trustme`` CA.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trustme

from loop.errors import ProviderError

DEFAULT_CERT_HOSTS = ("localhost", "127.0.0.1", "::1", "provider.skald.test")
# A recognisable API key for profiles pointed at the fake server; tests assert it never leaks.
TEST_SECRET = "sk-skald-test-7f3a9c2e5b1d4f60a8"


# --- scripted responses ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SSEResponse:
    """A 200 event stream.

    Attributes:
        chunks: JSON chunk dicts, or raw ``data:`` payload strings (to send malformed data).
        done: send ``data: [DONE]`` at the end.
        delay: seconds to wait before each chunk (a slow model), or one value per chunk.
        headers_delay: seconds to wait before sending the status line and headers.
        drop_after: abort the connection (no terminating chunk, no TLS close) after this many chunks.
        hold: before the last chunk, keep the stream open (SSE comments, which a client ignores)
            until this event is set or the client hangs up: a model that never finishes its turn
            unless the test says so. The server's ``holding`` event is set while it waits.
    """

    chunks: Sequence[dict[str, Any] | str]
    done: bool = True
    delay: float | Sequence[float] = 0.0
    headers_delay: float = 0.0
    drop_after: int | None = None
    hold: threading.Event | None = None


@dataclass(frozen=True)
class StatusResponse:
    """A plain (non-streaming) answer: an error status, a redirect, or a wrong content type."""

    status: int
    body: str | dict[str, Any] = ""
    headers: Mapping[str, str] = field(default_factory=dict)


Response = SSEResponse | StatusResponse


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: method, path, lower-cased headers, parsed JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    sni: str | None


ScriptEntry = Response | Callable[[RecordedRequest], Response]


def sse(chunks: Sequence[dict[str, Any] | str], **options: Any) -> SSEResponse:
    """Shorthand for :class:`SSEResponse`."""
    return SSEResponse(chunks=list(chunks), **options)


# --- chunk builders: the real wire shape ----------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` object."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake-model",
        "choices": (
            [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}] if choices else []
        ),
    }
    if usage is not None or not choices:
        body["usage"] = usage
    return body


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The final ``include_usage`` chunk: empty choices, usage set."""
    return chunk(
        choices=False,
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    )


def text_chunks(
    *pieces: str, finish_reason: str = "stop", usage: tuple[int, int] | None = (11, 7)
) -> list[dict[str, Any]]:
    """A text turn: role chunk, one chunk per piece, finish chunk, then the usage chunk."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in pieces]
    chunks.append(chunk({}, finish_reason=finish_reason))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return chunks


def tool_call_chunks(
    calls: Sequence[tuple[str, str, str]],
    *,
    split: int = 1,
    usage: tuple[int, int] | None = (20, 9),
) -> list[dict[str, Any]]:
    """A tool-call turn; each call's ``arguments`` JSON text is cut into pieces of ``split`` chars.

    Args:
        calls: ``(call_id, name, arguments_json)`` triples.
        split: characters per arguments fragment.
        usage: ``(prompt_tokens, completion_tokens)`` for the final chunk, or None to omit it.
    """
    chunks = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        for start in range(0, len(arguments), split):
            piece = arguments[start : start + split]
            chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, finish_reason="tool_calls"))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return chunks


# --- a scripted resolver ------------------------------------------------------------------------------


class FakeResolver:
    """A :class:`loop.providers.netguard.Resolver` with scripted answers and a call log.

    ``FakeResolver({"localhost": ["127.0.0.1"]})`` answers the same every time;
    ``.then(host, [...])`` adds a later answer (the last one repeats), to script DNS rebinding.
    """

    def __init__(self, answers: Mapping[str, Sequence[str]] | None = None) -> None:
        self._rounds: dict[str, list[list[str]]] = {
            host: [list(addresses)] for host, addresses in (answers or {}).items()
        }
        self.calls: list[tuple[str, int]] = []

    def then(self, host: str, addresses: Sequence[str]) -> FakeResolver:
        self._rounds.setdefault(host, []).append(list(addresses))
        return self

    def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        rounds = self._rounds.get(host)
        if not rounds:
            raise ProviderError("could not resolve the provider host", code="provider_dns_failed")
        return list(rounds[0] if len(rounds) == 1 else rounds.pop(0))


# --- the server ---------------------------------------------------------------------------------------


class FakeOpenAIServer:
    """A threaded HTTPS server on ``bind`` (an ephemeral port) answering from a script.

    Args:
        script: responses, one per request, in order.
        default: the answer once the script is exhausted (else HTTP 500 "script exhausted").
        cert_hosts: names/IPs on the server certificate (use a wrong one to test verification).
        bind: the listening address (``"127.0.0.1"`` or ``"::1"``).
        host: the hostname used in :attr:`base_url`.
        keep_alive: keep a connection open after a stream that ended well, as a real provider does
            (the default closes it after every response, as the first tests were written against).
    """

    def __init__(
        self,
        script: Sequence[ScriptEntry] = (),
        *,
        default: ScriptEntry | None = None,
        cert_hosts: Sequence[str] = DEFAULT_CERT_HOSTS,
        bind: str = "127.0.0.1",
        host: str = "localhost",
        keep_alive: bool = False,
    ) -> None:
        self.script: list[ScriptEntry] = list(script)
        self.keep_alive = keep_alive
        self.default = default
        self.requests: list[RecordedRequest] = []
        self.host = host
        self._bind = bind
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self.client_gone = threading.Event()
        # Barriers and counters for tests that must not read a clock: ``stalled`` is set when the
        # server starts a scripted wait (a delay or a hold), ``holding`` while a ``hold`` keeps a
        # stream open; ``headers_sent`` and ``chunks_sent`` count what reached the wire.
        self.stalled = threading.Event()
        self.holding = threading.Event()
        self.headers_sent = 0
        self.chunks_sent = 0
        self.connections = 0  # TLS connections accepted (a client that keeps one alive opens it once)
        self._ca = trustme.CA()
        self._cert = self._ca.issue_cert(*cert_hosts)
        self._dir = tempfile.mkdtemp(prefix="fake-openai-")
        self.ca_file = f"{self._dir}/ca.pem"
        self._ca.cert_pem.write_to_path(self.ca_file)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._sni = threading.local()

    # lifecycle

    def start(self) -> FakeOpenAIServer:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._cert.configure_cert(context)
        context.sni_callback = self._on_sni
        server_cls = _V6Server if ":" in self._bind else _V4Server
        httpd = server_cls((self._bind, 0), _Handler)
        httpd.fake = self  # type: ignore[attr-defined]
        httpd.tls = context  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # addresses

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() the server first"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return self.url_for(self.host)

    def url_for(self, host: str) -> str:
        """The base URL naming the server by ``host`` (resolve it to the bind address yourself)."""
        shown = f"[{host}]" if ":" in host else host
        return f"https://{shown}:{self.port}/v1"

    # scripting

    def push(self, *entries: ScriptEntry) -> None:
        with self._lock:
            self.script.extend(entries)

    def _next(self, recorded: RecordedRequest) -> Response:
        with self._lock:
            self.requests.append(recorded)
            entry = self.script.pop(0) if self.script else self.default
        if entry is None:
            return StatusResponse(500, {"error": {"message": "script exhausted"}})
        return entry(recorded) if callable(entry) else entry

    def _on_sni(self, sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        self._sni.name = name

    def sleep(self, seconds: float) -> bool:
        """Wait unless the server is stopping; True when it is."""
        if seconds <= 0:
            return self.stopping.is_set()
        self.stalled.set()
        return self.stopping.wait(seconds)

    def reset_counters(self) -> None:
        """Forget the barriers and counters (a module-scoped server between tests)."""
        self.client_gone.clear()
        self.stalled.clear()
        self.holding.clear()
        with self._lock:
            self.headers_sent = self.chunks_sent = self.connections = 0

    def profile_env(self, root: Path) -> dict[str, str]:
        """The deployment profile that points a Skald stack at this server, as an operator sets it:
        the key in a secret file under ``root``, the server's CA, loopback allowed."""
        (root / "provider.key").write_text(f"{TEST_SECRET}\n")
        (root / "ca.pem").write_bytes(Path(self.ca_file).read_bytes())
        return {"BRAIN_GDL_PROVIDER_BASE_URL": self.base_url, "BRAIN_GDL_PROVIDER_MODEL": "m",
                "BRAIN_GDL_PROVIDER_SECRET_FILE": "provider.key", "BRAIN_GDL_PROVIDER_SECRET_ROOT": str(root),
                "BRAIN_GDL_PROVIDER_ALLOW_CIDRS": "127.0.0.1/32", "BRAIN_GDL_PROVIDER_CA_FILE": str(root / "ca.pem")}


def _delay(delay: float | Sequence[float], index: int) -> float:
    if isinstance(delay, int | float):
        return float(delay)
    return float(delay[index]) if index < len(delay) else 0.0


class _V4Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # aborted connections are what several tests are about


class _V6Server(_V4Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def setup(self) -> None:
        with self.server.fake._lock:
            self.server.fake.connections += 1
        self.server.fake._sni.name = None
        self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        self.sni = self.server.fake._sni.name
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        fake: FakeOpenAIServer = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        recorded = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            sni=self.sni,
        )
        response = fake._next(recorded)
        self.close_connection = not (fake.keep_alive and isinstance(response, SSEResponse))
        try:
            if isinstance(response, StatusResponse):
                self._status(response)
            else:
                self._stream(response, fake)
        except OSError:  # includes ssl.SSLError, BrokenPipeError, ConnectionResetError
            fake.client_gone.set()  # the client hung up (cancellation tests)

    def _status(self, response: StatusResponse) -> None:
        payload = response.body if isinstance(response.body, str) else json.dumps(response.body)
        data = payload.encode()
        self.send_response(response.status)
        headers = {"Content-Type": "application/json", **response.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, response: SSEResponse, fake: FakeOpenAIServer) -> None:
        if fake.sleep(response.headers_delay):
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        with fake._lock:
            fake.headers_sent += 1
        last = len(response.chunks) - 1
        for sent, item in enumerate(response.chunks):
            if response.drop_after is not None and sent >= response.drop_after:
                self._abort()
                return
            if fake.sleep(_delay(response.delay, sent)):
                return
            if sent == last and response.hold is not None and self._hold(response.hold, fake):
                return
            payload = item if isinstance(item, str) else json.dumps(item)
            self._chunk(f"data: {payload}\n\n".encode())
            with fake._lock:
                fake.chunks_sent += 1
        if response.drop_after is not None and response.drop_after >= len(response.chunks):
            self._abort()
            return
        if response.done:
            self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _hold(self, release: threading.Event, fake: FakeOpenAIServer) -> bool:
        """Keep the stream open until ``release``; True when the server stops first. A client that
        hangs up meanwhile makes a comment write fail (OSError: ``client_gone``)."""
        fake.stalled.set()
        fake.holding.set()
        try:
            while not release.wait(0.02):  # the comment's cadence only decides how soon a hang-up shows
                if fake.stopping.is_set():
                    return True
                self._chunk(b": held\n\n")
            return False
        finally:
            fake.holding.clear()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _abort(self) -> None:
        # A crash, not a goodbye: no terminating chunk and no TLS close_notify.
        time.sleep(0.01)
        socket.socket.shutdown(self.connection, socket.SHUT_RDWR)
