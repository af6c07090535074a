"""The process's MCP client: one background event-loop thread holding one pooled session per server.

The SDK is asyncio; the kernel runs tools on sync worker threads. Each worker process therefore
keeps one daemon thread running an event loop, and each server one connection in it, opened on
first use (a stdio server is started then), reopened when it died or its configuration changed,
and closed when idle for ``SKALD_MCP_IDLE_SECONDS``. A connection is never truth: the database is
(any worker on any machine may serve a session's next call).

Failures are never a silent empty result: a server that cannot be reached, dies or breaks the
transport raises :class:`McpUnavailable`, a :class:`loop.tools.infra.ToolInfrastructureFailure`
(the exchange breaks, the call is left for recovery); a server's own error reply raises
:class:`McpCallError` (model-visible).

Cancellation: a stop cancels the call's task, so the SDK sends ``notifications/cancelled``; a stdio
server that then does not answer a ping within :data:`CANCEL_GRACE` seconds has its process group
killed (it was started in a session of its own).

A server's requests during a call (``elicitation/create``, ``sampling/createMessage``) reach the
call's own handlers (:class:`_Inflight`). The protocol does not say which call such a request
belongs to (the session is shared by every call to the server in this process), so it is served
only while exactly one call is in flight on the connection, and refused otherwise. While a person
answers an elicitation, the call's own timeout is paused.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import mcp_types
from anyio.streams.text import TextReceiveStream
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from loop import tracing
from loop.cancellation import CancelToken
from skald.mcp.calls import (
    CallResult,
    Elicit,
    ElicitRequest,
    McpCallCancelled,
    McpCallError,
    McpUnavailable,
    Progress,
    Sample,
    SampleRequest,
    SamplingRefused,
    ServerSpec,
)
from skald.mcp.definitions import Definition
from skald.mcp.http_transport import http_streams

logger = logging.getLogger(__name__)

_SAMPLERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="mcp-sample")
CANCEL_GRACE = 1.0  # seconds a stdio server has to answer after a cancellation before it is killed
CONNECT_TIMEOUT = 15.0
REAP_EVERY = 30.0


def _progress(report: Progress) -> Any:
    """The SDK's async progress callback over a sync reporter, run off the event loop."""

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, report, progress, total, message)

    return forward


def definition_of(tool: mcp_types.Tool) -> Definition:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    return Definition(name=tool.name, description=tool.description or "", input_schema=dict(tool.input_schema or {}),
                      annotations=annotations)


# --- stdio: the SDK's framing (one JSON-RPC message a line), with the process kept at hand ---------

@dataclass
class _Process:
    pid: int = 0
    process: Any = None

    def kill_group(self) -> None:
        if self.pid:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


@asynccontextmanager
async def _stdio(spec: ServerSpec, handle: _Process) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server in a process group of its own (so a kill reaches its children) and carry
    newline-delimited JSON-RPC, as the SDK's ``stdio_client`` does; kept here because the pool
    must know the process to kill its group and to see it die."""
    argv, env, cwd = list(spec.argv), dict(spec.env), spec.cwd
    if spec.sandbox is not None:  # bubblewrap (skald/mcp/sandbox.py); it dies with its parent, the group's leader
        launch = spec.sandbox.launch(argv[0], argv, workspace=cwd, env=env)
        argv, env, cwd = launch.args, launch.env, launch.cwd
    process = await anyio.open_process(argv, env=env, cwd=cwd, start_new_session=True, stderr=subprocess.DEVNULL)
    handle.pid, handle.process = process.pid, process
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        buffer = ""
        async with read_writer:
            with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in TextReceiveStream(process.stdout):
                    lines = (buffer + chunk).split("\n")
                    buffer = lines.pop()
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            message: SessionMessage | Exception = SessionMessage(
                                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
                        except ValueError as exc:
                            message = exc
                        await read_writer.send(message)

    async def writer() -> None:
        assert process.stdin is not None
        async with write_reader:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for item in write_reader:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                with suppress(Exception):
                    await process.stdin.aclose()  # type: ignore[union-attr]
                with anyio.move_on_after(0.5):
                    await process.wait()
                if process.returncode is None:
                    handle.kill_group()
                    with anyio.move_on_after(2.0):
                        await process.wait()
            group.cancel_scope.cancel()


# --- one call in flight ---------------------------------------------------------------------------

@dataclass
class _Inflight:
    """A call in flight, with what serves the server's requests during it and its own deadline
    (an anyio cancel scope, so a person's answer time can be taken out of it)."""

    elicit: Elicit | None = None
    sample: Sample | None = None
    scope: anyio.CancelScope = field(default_factory=lambda: None)  # type: ignore[assignment]  # made on the loop
    waits: set[asyncio.Task[Any]] = field(default_factory=set)  # elicitations awaiting a person
    _paused: int = 0
    _left: float = 0.0

    @contextmanager
    def paused(self) -> Iterator[None]:
        if self._paused == 0:
            self._left = max(0.0, self.scope.deadline - anyio.current_time())
            self.scope.deadline = math.inf
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
            if self._paused == 0:
                self.scope.deadline = anyio.current_time() + self._left


def _refuse(message: str) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=message)


def _sample_request(params: mcp_types.CreateMessageRequestParams) -> SampleRequest:
    messages: list[tuple[str, str]] = []
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        messages.append((message.role, "\n".join(b.text for b in blocks if isinstance(b, mcp_types.TextContent))))
    return SampleRequest(messages=tuple(messages), system=params.system_prompt or "", max_tokens=params.max_tokens,
                         temperature=params.temperature)


# --- one connection -----------------------------------------------------------------------------

class _Connection:
    def __init__(self, spec: ServerSpec, on_list_changed: Callable[[str], None] | None) -> None:
        self.spec = spec
        self.session: ClientSession | None = None
        self.listing: tuple[Definition, ...] = ()
        self.process = _Process()
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.error: str = ""
        self.dead = False
        self.inflight = 0
        self.last_used = time.monotonic()
        self.on_list_changed = on_list_changed
        self.task: asyncio.Task[None] | None = None
        self.calls: list[_Inflight] = []

    async def run(self) -> None:
        try:
            async with self._transport() as (read, write):
                async with ClientSession(read, write, message_handler=self._message,
                                         elicitation_callback=self._elicit, sampling_callback=self._sample) as session:
                    with anyio.fail_after(CONNECT_TIMEOUT):
                        await session.initialize()
                        self.listing = tuple(definition_of(t) for t in await self._list_all(session))
                    self.session = session
                    self.ready.set()
                    await self.closing.wait()
        except BaseException as exc:
            self.error = _describe(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.dead = True
            self.session = None
            self.ready.set()

    @staticmethod
    async def _list_all(session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(50):  # a server paging forever is refused, not followed
            result = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor) if cursor
                                              else None)
            tools.extend(result.tools)
            cursor = result.next_cursor
            if not cursor:
                return tools
        raise McpCallError("tools/list did not end after 50 pages")

    def _transport(self) -> Any:
        if self.spec.transport == "stdio":
            return _stdio(self.spec, self.process)
        return http_streams(self.spec)

    async def _message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification) and self.on_list_changed is not None:
            callback, name = self.on_list_changed, self.spec.name
            threading.Thread(target=callback, args=(name,), name=f"mcp-list-changed:{name}", daemon=True).start()

    def _sole_call(self) -> _Inflight | None:
        return self.calls[0] if len(self.calls) == 1 else None

    async def _elicit(self, context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        """``elicitation/create``: the call's owner answers (skald.mcp.elicitation); the call's
        timeout is paused meanwhile."""
        call = self._sole_call()
        if call is None or call.elicit is None:
            return _refuse("Skald serves an elicitation only during a single call of this server "
                           f"({len(self.calls)} in flight)")
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            return _refuse("Skald supports form elicitation only")
        task = asyncio.current_task()
        if task is not None:
            call.waits.add(task)  # a call that ends (a stop) withdraws its cards
        try:
            with call.paused():
                answer = await call.elicit(ElicitRequest(message=params.message, schema=dict(params.requested_schema)))
        except Exception as exc:
            logger.exception("MCP server %s: elicitation failed", self.spec.name)
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=_describe(exc))
        finally:
            if task is not None:
                call.waits.discard(task)
        content = dict(answer.content) if answer.action == "accept" and answer.content is not None else None
        return mcp_types.ElicitResult(action=answer.action, content=content)  # type: ignore[arg-type]

    async def _sample(self, context: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        """``sampling/createMessage``: the calling frame's provider, on a thread off the loop."""
        call = self._sole_call()
        if call is None or call.sample is None:
            return _refuse(f"Skald serves sampling only during a single call of this server ({len(self.calls)} in "
                           "flight)")
        try:
            answer = await asyncio.get_running_loop().run_in_executor(_SAMPLERS, call.sample, _sample_request(params))
        except SamplingRefused as exc:
            return _refuse(str(exc))
        return mcp_types.CreateMessageResult(role="assistant", model=answer.model, stop_reason=answer.stop_reason,
                                             content=mcp_types.TextContent(type="text", text=answer.text))

    @property
    def alive(self) -> bool:
        if self.dead or self.session is None:
            return False
        return self.spec.transport != "stdio" or self.process.alive


def _meta(traceparent: str) -> mcp_types.RequestParamsMeta | None:
    return cast("mcp_types.RequestParamsMeta", {"traceparent": traceparent}) if traceparent else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0] if exc.exceptions else exc
        return _describe(exc) if not isinstance(exc, BaseExceptionGroup) or exc.exceptions else type(exc).__name__
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- the pool -----------------------------------------------------------------------------------

class McpPool:
    """One event loop thread and one connection per server, for this process. Thread-safe."""

    def __init__(self, *, idle_seconds: float = 300.0) -> None:
        self.idle_seconds = idle_seconds
        self.on_list_changed: Callable[[str], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._connections: dict[str, _Connection] = {}
        self._opening: dict[str, asyncio.Lock] = {}  # used only on the loop's thread
        self._reaper: asyncio.Task[None] | None = None
        self.started = 0  # connections opened (a restart counts), for tests and metrics

    # sync API (worker threads) ------------------------------------------------------------------

    def listing(self, spec: ServerSpec, *, fresh: bool = False) -> tuple[Definition, ...]:
        """The server's tools: as listed when its connection opened, or listed now (``fresh``).

        Raises:
            McpUnavailable: the server cannot be reached or died.
        """
        return self._submit(self._listing(spec, fresh), timeout=CONNECT_TIMEOUT + 5, server=spec.name)

    def call(self, spec: ServerSpec, tool: str, arguments: Mapping[str, Any], *, cancel: CancelToken,
             timeout: float, on_progress: Progress | None = None, elicit: Elicit | None = None,
             sample: Sample | None = None) -> CallResult:
        """Call ``tool``; a stop on ``cancel`` cancels it (``notifications/cancelled``). ``elicit`` and
        ``sample`` serve the server's requests during the call (refused without them).

        Raises:
            McpUnavailable: transport failure or dead server (infrastructure).
            McpCallError: the server's own error reply.
            McpCallCancelled: the call was cancelled.
            TimeoutError: the server did not answer within ``timeout``.
        """
        loop = self._ensure_loop()
        # The calling thread's span (the call's execute_tool) travels in the request's _meta, and
        # an HTTP transport copies it into the traceparent header (skald/mcp/http_transport.py).
        traceparent = tracing.tracer.traceparent() if tracing.enabled else ""
        future = asyncio.run_coroutine_threadsafe(
            self._call(spec, tool, dict(arguments), timeout, on_progress, traceparent=traceparent,
                       inflight=_Inflight(elicit=elicit, sample=sample)), loop)
        def stop() -> None:
            loop.call_soon_threadsafe(future.cancel)

        unregister = cancel.on_cancel(stop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            killed = self._submit(self._after_cancel(spec.name), timeout=CANCEL_GRACE + 5, server=spec.name)
            raise McpCallCancelled(bool(killed)) from None
        finally:
            unregister()

    def close(self, name: str) -> None:
        if self._loop is not None:
            self._submit(self._close(name), timeout=10, server=name)

    def close_all(self) -> None:
        if self._loop is not None:
            for name in list(self._connections):
                self.close(name)

    def process_of(self, name: str) -> int:
        """The pid of a stdio server's running process (0: none); tests kill it with this."""
        connection = self._connections.get(name)
        return connection.process.pid if connection is not None and connection.alive else 0

    # inside the loop ----------------------------------------------------------------------------

    def _submit(self, coroutine: Any, *, timeout: float, server: str) -> Any:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpUnavailable(server, "no answer in time") from None

    async def _connection(self, spec: ServerSpec) -> _Connection:
        # One opener per server at a time: concurrent first calls (a fanned-out round) share it.
        async with self._opening.setdefault(spec.name, asyncio.Lock()):
            return await self._open(spec)

    async def _open(self, spec: ServerSpec) -> _Connection:
        current = self._connections.get(spec.name)
        if current is not None and current.alive and current.spec.fingerprint == spec.fingerprint:
            return current
        if current is not None:
            await self._close(spec.name)
        connection = _Connection(spec, self.on_list_changed)
        self._connections[spec.name] = connection
        self.started += 1
        connection.task = asyncio.get_running_loop().create_task(connection.run())
        await connection.ready.wait()
        if not connection.alive:
            self._connections.pop(spec.name, None)
            raise McpUnavailable(spec.name, connection.error or "the connection ended")
        return connection

    async def _listing(self, spec: ServerSpec, fresh: bool) -> tuple[Definition, ...]:
        connection = await self._connection(spec)
        if not fresh:
            return connection.listing
        assert connection.session is not None
        try:
            tools = await connection._list_all(connection.session)
        except MCPError as exc:
            raise McpUnavailable(spec.name, _describe(exc)) from None
        connection.listing = tuple(definition_of(t) for t in tools)
        return connection.listing

    async def _call(self, spec: ServerSpec, tool: str, arguments: dict[str, Any], timeout: float,
                    on_progress: Progress | None = None, *, traceparent: str = "",
                    inflight: _Inflight | None = None) -> CallResult:
        connection = await self._connection(spec)
        session = connection.session
        if session is None:
            raise McpUnavailable(spec.name, connection.error or "the connection ended")
        # The call's deadline is its own scope's (not the SDK's read timeout), so an elicitation
        # can pause it while a person answers.
        call = inflight or _Inflight()
        call.scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        connection.inflight += 1
        connection.calls.append(call)
        connection.last_used = time.monotonic()
        result: Any = None
        try:
            with call.scope:
                result = await session.call_tool(tool, arguments,
                                                 progress_callback=_progress(on_progress) if on_progress else None,
                                                 meta=_meta(traceparent))
        except MCPError as exc:
            if not connection.alive or exc.error.code == mcp_types.CONNECTION_CLOSED:
                connection.dead = True
                connection.closing.set()
                raise McpUnavailable(spec.name, connection.error or _describe(exc)) from None
            if exc.error.code == mcp_types.REQUEST_TIMEOUT:
                raise TimeoutError(f"MCP server {spec.name!r} did not answer within {timeout:g} s") from None
            raise McpCallError(f"{exc.error.message} (code {exc.error.code})") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            connection.dead = True
            connection.closing.set()
            raise McpUnavailable(spec.name, _describe(exc)) from None
        finally:
            connection.inflight -= 1
            connection.calls.remove(call)
            for wait in list(call.waits):
                wait.cancel()
            connection.last_used = time.monotonic()
        if result is None:  # the deadline passed (raised here: a TimeoutError is an OSError, the transport's)
            raise TimeoutError(f"MCP server {spec.name!r} did not answer within {timeout:g} s")
        content = [block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content]
        return CallResult(content=content, structured=result.structured_content, is_error=bool(result.is_error))

    async def _after_cancel(self, name: str) -> bool:
        """After a cancellation: a stdio server must answer a ping within the grace, or its
        process group is killed. Returns whether it was killed."""
        connection = self._connections.get(name)
        if connection is None or connection.session is None or connection.spec.transport != "stdio":
            return False
        try:
            with anyio.fail_after(CANCEL_GRACE):
                await connection.session.send_ping()
            return False
        except Exception:  # noqa: BLE001 - no answer in time (or a dead pipe): kill the group
            connection.process.kill_group()
            await self._close(name)
            return True

    async def _close(self, name: str) -> None:
        connection = self._connections.pop(name, None)
        if connection is None:
            return
        connection.closing.set()
        if connection.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(connection.task), 5.0)
            except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                connection.process.kill_group()
                connection.task.cancel()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY)
            now = time.monotonic()
            for name, connection in list(self._connections.items()):
                if connection.inflight == 0 and now - connection.last_used > self.idle_seconds:
                    await self._close(name)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and self._thread is not None and self._thread.is_alive():
                return self._loop
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                self._reaper = loop.create_task(self._reap())
                loop.call_soon(ready.set)
                loop.run_forever()

            self._thread = threading.Thread(target=serve, name="mcp-client", daemon=True)
            self._thread.start()
            ready.wait()
            self._loop = loop
            return loop


_pool: McpPool | None = None
_pool_lock = threading.Lock()


def pool() -> McpPool:
    """The process's one pool (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from django.conf import settings

            _pool = McpPool(idle_seconds=settings.SKALD_MCP_IDLE_SECONDS)
            atexit.register(_pool.close_all)  # a worker that exits stops its stdio servers first
        return _pool
