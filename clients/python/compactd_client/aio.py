"""The asyncio client: the same protocol as `Client`, for agents that run an event loop.

Every typed method is a coroutine; events arrive as (sync or async) callbacks and as an async
iterator (``async for ev in client.events()``); hook handlers may be coroutines, so a
``session_before_compact`` answer can await other work. One reader task per connection.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import os
import traceback
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Set

from ._methods import Methods
from ._wire import (
    NO_REPLY,
    REQUEST_HOOKS,
    log_message,
    log_stderr_line,
    start_command,
    start_failed,
    CompactdError,
    ConnectionClosed,
    DaemonNotRunning,
    NotYourDaemon,
    check_peer,
    check_socket_dir,
    Event,
    Peer,
    content_length,
    default_socket_path,
    encode_body,
    encode_frame,
    encode_message,
    find_binary,
    not_answering,
    peer_pid,
    unreadable_targets,
)

#: Frames up to the daemon's default limit (64 MiB) must fit the stream reader's line buffer.
_STREAM_LIMIT = 64 << 20


async def _forward_stderr(stream: asyncio.StreamReader) -> None:
    """Forwards the daemon's stderr, line by line, to the ``compactd`` logger."""
    while True:
        line = await stream.readline()
        if not line:
            return
        log_stderr_line(line)


async def _report(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:
        traceback.print_exc()


class AsyncEventStream:
    """``async for ev in stream`` over event notifications, fed from the moment it was created;
    ends when the connection closes. ``await stream.next_event(timeout)`` waits at most
    `timeout` seconds (``asyncio.TimeoutError`` past it)."""

    _CLOSED = object()

    def __init__(self, client: "AsyncClient", names: Optional[Iterable[str]], session_id: Optional[str]):
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self._names = set(names) if names else None
        self._session_id = session_id
        self._client = client
        client._streams.add(self)
        if client.closed:
            self._queue.put_nowait(self._CLOSED)

    def _push(self, name: str, params: Any) -> None:
        if self._names is not None and name not in self._names:
            return
        if self._session_id is not None and (params or {}).get("sessionId") != self._session_id:
            return
        self._queue.put_nowait(Event(name, params))

    def _end(self) -> None:
        self._queue.put_nowait(self._CLOSED)

    async def next_event(self, timeout: Optional[float] = None) -> Event:
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if item is self._CLOSED:
            self._queue.put_nowait(item)
            raise StopAsyncIteration
        return item

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        return await self.next_event()

    def close(self) -> None:
        self._client._streams.discard(self)


class AsyncClient(Methods):
    """One JSON-RPC connection to compactd (asyncio API)."""

    def __init__(self, reader: asyncio.StreamReader, writer: Any, framing: str = "ndjson", closer: Optional[Callable[[], Awaitable[None]]] = None):
        self.framing = framing
        self._reader = reader
        self._writer = writer
        self._closer = closer
        self._ids = itertools.count(1)
        self._pending: Dict[Any, "asyncio.Future[Any]"] = {}
        #: The size of each waiting request's frame body (what a null-id error names).
        self._pending_sizes: Dict[Any, int] = {}
        #: Who answers (socket, pid): named when a call gets no answer in time.
        self.peer = Peer(None, None)
        self._listeners: Dict[str, List[Callable[[Any], Any]]] = {}
        self._hooks: Dict[str, List[Dict[str, Any]]] = {}
        self._streams: Set[AsyncEventStream] = set()
        self._tasks: Set["asyncio.Task[Any]"] = set()
        #: Default reply timeout of the typed methods, seconds (None: wait as long as it takes).
        self.timeout: Optional[float] = 120.0
        self.closed = False
        self.process: Optional[asyncio.subprocess.Process] = None
        self._read_task = asyncio.ensure_future(self._read_loop())

    # --- construction --------------------------------------------------------------------

    @classmethod
    async def spawn_stdio(cls, bin: Optional[str] = None, args: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None, framing: str = "ndjson", stderr: Any = "log") -> "AsyncClient":
        """Spawns ``compactd stdio [args]`` (binary: `bin`, ``$COMPACTD_BIN``, then ``PATH``;
        `BinaryNotFound` otherwise) and talks to it over stdin/stdout. Its stderr (only real
        errors) goes to the ``compactd`` logger unless another `stderr` is given."""
        proc = await asyncio.create_subprocess_exec(
            find_binary(bin), "stdio", *(args or []),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE if stderr == "log" else stderr,
            env=env, limit=_STREAM_LIMIT,
        )

        forwarder: List["asyncio.Future[None]"] = []

        async def closer() -> None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                proc.terminate()
                await proc.wait()
            # Every line the daemon wrote to stderr is logged before `close` returns.
            if forwarder:
                try:
                    await asyncio.wait_for(asyncio.shield(forwarder[0]), 5)
                except asyncio.TimeoutError:
                    pass

        assert proc.stdout is not None and proc.stdin is not None
        client = cls(proc.stdout, proc.stdin, framing, closer)
        client.process = proc
        client.peer = Peer(None, proc.pid)
        if stderr == "log" and proc.stderr is not None:
            task = asyncio.ensure_future(_forward_stderr(proc.stderr))
            forwarder.append(task)
            client._tasks.add(task)
            task.add_done_callback(client._tasks.discard)
        return client

    @classmethod
    async def connect_or_start(cls, path: Optional[str] = None, bin: Optional[str] = None, env: Optional[Dict[str, str]] = None, framing: str = "ndjson") -> "AsyncClient":
        """`Client.connect_or_start` for asyncio: connects, starting the daemon first when none
        answers on the socket."""
        path = path or default_socket_path()
        try:
            return await cls.connect(path, framing)
        except DaemonNotRunning:
            pass
        proc = await asyncio.create_subprocess_exec(
            *start_command(bin, path), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        if proc.returncode != 0:
            import subprocess

            raise start_failed(path, subprocess.CompletedProcess([], proc.returncode or 1, out, err))
        return await cls.connect(path, framing)

    async def forward_daemon_log(self) -> Callable[[], None]:
        """Sends the daemon's log lines to the ``compactd`` logger at their level."""
        remove = self.on("window/logMessage", log_message)
        await self.initialize(log_notifications=True)
        return remove

    @classmethod
    async def connect(cls, path: Optional[str] = None, framing: str = "ndjson") -> "AsyncClient":
        """Connects to a running ``compactd serve`` (`path`, else the default socket);
        `DaemonNotRunning` when nothing listens there, `NotYourDaemon` when the socket's
        directory or the daemon is not this user's own."""
        path = path or default_socket_path()
        check_socket_dir(path)
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=_STREAM_LIMIT)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonNotRunning(
                f"no compactd daemon listening on {path} ({e.strerror or os.strerror(e.errno or 0)}); "
                "start one with `compactd serve`"
            ) from e
        try:
            check_peer(writer.get_extra_info("socket"), path)
        except NotYourDaemon:
            writer.close()
            raise

        async def closer() -> None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

        client = cls(reader, writer, framing, closer)
        client.peer = Peer(path, peer_pid(writer.get_extra_info("socket")))
        return client

    # --- wire ----------------------------------------------------------------------------

    async def _read_frame(self) -> Optional[bytes]:
        r = self._reader
        if self.framing == "ndjson":
            while True:
                line = await r.readline()
                if not line:
                    return None
                line = line.strip()
                if line:
                    return line
        length = None
        while True:
            line = await r.readline()
            if not line:
                return None
            stripped = line.rstrip(b"\r\n")
            if not stripped:
                if length is None:
                    continue
                break
            n = content_length(stripped)
            if n is not None:
                length = n
        try:
            return await r.readexactly(length)
        except asyncio.IncompleteReadError:
            return None

    async def _read_loop(self) -> None:
        try:
            while True:
                body = await self._read_frame()
                if body is None:
                    break
                try:
                    msg = json.loads(body.decode("utf-8"))
                except ValueError:
                    continue
                for m in msg if isinstance(msg, list) else [msg]:
                    if isinstance(m, dict):
                        self._dispatch(m)
        except (OSError, ValueError, asyncio.LimitOverrunError):
            pass
        finally:
            self.closed = True
            pending, self._pending = self._pending, {}
            self._pending_sizes = {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("the daemon closed the connection"))
            for s in list(self._streams):
                s._end()
            self._fire("close", None)

    def _send(self, msg: Dict[str, Any]) -> None:
        if self.closed:
            raise ConnectionClosed("the connection to the daemon is closed")
        self._writer.write(encode_message(msg, self.framing))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _dispatch(self, msg: Dict[str, Any]) -> None:
        if "method" in msg:
            if "id" in msg:
                self._spawn(self._answer_hook(msg))
            else:
                self._fire(msg["method"], msg.get("params"))
            return
        mid = msg.get("id")
        if mid is None and isinstance(msg.get("error"), dict):
            # An error with a null id fails the waiting calls it can belong to.
            for target in unreadable_targets(self._pending_sizes, msg["error"]):
                self._pending_sizes.pop(target, None)
                waiting = self._pending.pop(target, None)
                if waiting is not None and not waiting.done():
                    waiting.set_exception(CompactdError.from_json(msg["error"], None))
            return
        self._pending_sizes.pop(mid, None)
        fut = self._pending.pop(mid, None)
        if fut is None or fut.done():
            return
        if "error" in msg:
            fut.set_exception(CompactdError.from_json(msg["error"], msg.get("id")))
        else:
            fut.set_result(msg.get("result"))

    async def _answer_hook(self, msg: Dict[str, Any]) -> None:
        params = msg.get("params") or {}
        handlers = [
            h for h in self._hooks.get(msg["method"], [])
            if h["session_id"] is None or h["session_id"] == params.get("sessionId")
        ]
        result: Any = None
        try:
            for h in handlers:
                r = h["fn"](params)
                if inspect.isawaitable(r):
                    r = await r
                if r is NO_REPLY:
                    return
                if r:
                    result = r
                    if isinstance(r, dict) and r.get("cancel") is True:
                        break
            reply: Dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
        except Exception as e:  # a failing handler answers with an error
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32603, "message": str(e)}}
        try:
            self._send(reply)
        except (OSError, ConnectionClosed):
            pass

    def _fire(self, name: str, params: Any) -> None:
        # A failing callback is reported and skipped; it must not stop the reader task.
        for cb in list(self._listeners.get(name, [])):
            try:
                r = cb(params)
                if inspect.isawaitable(r):
                    self._spawn(_report(r))
            except Exception:
                traceback.print_exc()
        if name != "close":
            for s in list(self._streams):
                s._push(name, params)

    # --- requests ------------------------------------------------------------------------

    async def request(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: Optional[float] = None) -> Any:
        """Sends a request and awaits its result; raises `CompactdError` on an error reply,
        `NotJsonError` before sending params JSON cannot carry (``NaN``, infinities), and
        `DaemonNotAnswering` (a `TimeoutError` naming the socket and the daemon's pid) when no
        answer comes within `timeout` seconds (default: the client's `timeout`)."""
        mid = next(self._ids)
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": mid, "method": method}
        if params is not None:
            msg["params"] = params
        body = encode_body(msg)
        if self.closed:
            raise ConnectionClosed("the connection to the daemon is closed")
        fut: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        self._pending[mid] = fut
        self._pending_sizes[mid] = len(body)
        wait = timeout if timeout is not None else self.timeout
        try:
            try:
                self._writer.write(encode_frame(body, self.framing))
                await self._writer.drain()
            except (OSError, ConnectionError) as e:
                raise ConnectionClosed(f"cannot write to the daemon: {e}") from e
            try:
                return await asyncio.wait_for(fut, wait)
            except asyncio.TimeoutError:
                raise not_answering(self.peer, method, wait) from None
        finally:
            self._pending.pop(mid, None)
            self._pending_sizes.pop(mid, None)

    def _call(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: Optional[float] = None) -> Any:
        return self.request(method, params, timeout)

    async def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._send(msg)
        await self._writer.drain()

    # --- events and hooks ----------------------------------------------------------------

    def on(self, name: str, callback: Callable[[Any], Any]) -> Callable[[], None]:
        """Calls ``callback(params)`` (a plain function or a coroutine function) for each
        notification ``name``, or ``"close"``. Returns a remover. Events need ``subscribe``."""
        self._listeners.setdefault(name, []).append(callback)

        def remove() -> None:
            if callback in self._listeners.get(name, []):
                self._listeners[name].remove(callback)

        return remove

    def events(self, names: Optional[Iterable[str]] = None, session_id: Optional[str] = None) -> AsyncEventStream:
        """An async iterator of `Event` from now on (optionally only `names` / one session)."""
        return AsyncEventStream(self, names, session_id)

    async def on_hook(self, hook: str, handler: Callable[[Dict[str, Any]], Any], session_id: Optional[str] = None, timeout_ms: Optional[int] = None) -> Any:
        """Registers ``handler`` (sync or async) locally and with ``registerHooks``; for request
        hooks its (awaited) return value is the reply, as for `Client.on_hook`."""
        if hook in REQUEST_HOOKS:
            self._hooks.setdefault(hook, []).append({"fn": handler, "session_id": session_id})
        else:
            def relay(p: Any) -> Any:
                if session_id is None or (p or {}).get("sessionId") == session_id:
                    return handler(p)
                return None

            self.on(hook, relay)
        return await self.register_hooks([hook], session_id, timeout_ms)

    # --- teardown ------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closer:
            closer, self._closer = self._closer, None
            await closer()
        try:
            await asyncio.wait_for(self._read_task, 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._read_task.cancel()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


__all__ = ["AsyncClient", "AsyncEventStream"]
