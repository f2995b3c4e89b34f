"""The blocking client: one JSON-RPC connection to compactd, driven from ordinary threads.

Two framings, as the daemon detects them per connection from the first byte:

* ``"lsp"``: ``Content-Length: N\\r\\n\\r\\n`` followed by N bytes of UTF-8 JSON, exactly what
  Neovim's ``vim.lsp.rpc`` writes (and how it reads: headers are ``Name: value`` lines, matched
  case-insensitively, ended by an empty line; only ``Content-Length`` matters);
* ``"ndjson"``: one JSON message per line.

Transports: ``Client.spawn_stdio()`` runs ``compactd stdio`` (LSP framing by default, as an editor
would), ``Client.connect()`` talks to a running ``compactd serve`` on its default socket (or
``Client.connect_socket(path)``; NDJSON by default), and ``Client.connect_or_start()`` starts that
daemon first when none runs. One background thread reads frames; requests
block the caller (the typed methods, ``request``) or return a ``concurrent.futures.Future``
(``request_async``). Events go to callbacks (``on``) or to an iterator (``events``); hook requests
go to handlers registered with ``on_hook``.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import itertools
import json
import queue
import socket
import subprocess
import threading
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

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

#: Default wait for a reply, seconds (compactions pass their own, longer, timeout).
DEFAULT_TIMEOUT = 120.0


class FrameReader:
    """Reads frames from a binary file object in one framing.

    For LSP framing, ``last_headers`` keeps the raw header block of the last frame (bytes), so
    callers can check what the server emitted.
    """

    def __init__(self, rfile, framing: str):
        self.rfile = rfile
        self.framing = framing
        self.last_headers: Optional[bytes] = None

    def read(self) -> Optional[bytes]:
        """The next frame's body, or ``None`` at end of stream."""
        if self.framing == "ndjson":
            while True:
                line = self.rfile.readline()
                if not line:
                    return None
                line = line.rstrip(b"\r\n")
                if line.strip():
                    return line
        # LSP: header lines up to an empty line, then Content-Length bytes.
        raw = b""
        length = None
        while True:
            line = self.rfile.readline()
            if not line:
                return None
            raw += line
            stripped = line.rstrip(b"\r\n")
            if not stripped:
                if length is None:
                    if raw.strip():
                        raise ValueError(f"frame without Content-Length: {raw!r}")
                    raw = b""
                    continue  # stray blank line between frames
                break
            n = content_length(stripped)
            if n is not None:
                length = n
        self.last_headers = raw
        body = b""
        while len(body) < length:
            chunk = self.rfile.read(length - len(body))
            if not chunk:
                return None
            body += chunk
        return body


class EventStream:
    """An iterator over event notifications, fed from the moment it was created.

    ``for ev in client.events(): ...`` yields `Event` tuples until the connection closes;
    ``next_event(timeout)`` waits at most `timeout` seconds (``TimeoutError`` past it).
    """

    _CLOSED = object()

    def __init__(self, client: "Client", names: Optional[Iterable[str]], session_id: Optional[str]):
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._names = set(names) if names else None
        self._session_id = session_id
        self._remove = client._add_any_listener(self._push)
        self._remove_close = client.on("close", lambda _: self._queue.put(self._CLOSED))
        if client.closed:
            self._queue.put(self._CLOSED)

    def _push(self, name: str, params: Any) -> None:
        if self._names is not None and name not in self._names:
            return
        if self._session_id is not None and (params or {}).get("sessionId") != self._session_id:
            return
        self._queue.put(Event(name, params))

    def next_event(self, timeout: Optional[float] = None) -> Event:
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no event within the timeout") from None
        if item is self._CLOSED:
            self._queue.put(item)
            raise StopIteration
        return item

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return self.next_event()

    def close(self) -> None:
        self._remove()
        self._remove_close()


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _forward_stderr(pipe: Any) -> None:
    """Forwards the daemon's stderr, line by line, to the ``compactd`` logger."""
    try:
        for line in iter(pipe.readline, b""):
            log_stderr_line(line)
    except (OSError, ValueError):
        pass


class Client(Methods):
    """One JSON-RPC connection to compactd (blocking API; a reader thread underneath)."""

    def __init__(self, rfile, wfile, framing: str = "lsp", closer: Optional[Callable[[], None]] = None):
        self.framing = framing
        if isinstance(rfile, io.RawIOBase):
            # Unbuffered readline() would issue one read per byte (slow on big frames).
            rfile = io.BufferedReader(rfile, 1 << 16)
        self._reader = FrameReader(rfile, framing)
        self._wfile = wfile
        self._closer = closer
        self._write_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[Any, Future] = {}
        #: The size of each waiting request's frame body (what a null-id error names).
        self._pending_sizes: Dict[Any, int] = {}
        self._pending_lock = threading.Lock()
        #: Who answers (socket, pid): named when a call gets no answer in time.
        self.peer = Peer(None, None)
        self._listeners: Dict[str, List[Callable[[Any], None]]] = {}
        self._any_listeners: List[Callable[[str, Any], None]] = []
        self._hooks: Dict[str, List[Dict[str, Any]]] = {}
        self._cond = threading.Condition()
        #: Default reply timeout of the typed methods, seconds.
        self.timeout = DEFAULT_TIMEOUT
        #: Every message received, in order: ("response"|"notification"|"request"|"error", msg).
        self.received: List[Any] = []
        #: Error responses that match no request (e.g. `id: null` for malformed input).
        self.orphan_errors: List[Dict[str, Any]] = []
        #: Raw LSP header blocks of the frames received (LSP framing only).
        self.raw_headers: List[bytes] = []
        self.closed = False
        self.process: Optional[subprocess.Popen] = None
        self._thread = threading.Thread(target=self._read_loop, name="compactd-client-reader", daemon=True)
        self._thread.start()

    # --- construction --------------------------------------------------------------------

    @classmethod
    def spawn_stdio(
        cls,
        bin: Optional[str] = None,
        args: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        framing: str = "lsp",
        stderr: Any = "log",
    ) -> "Client":
        """Spawns ``compactd stdio [args]`` (binary: `bin`, ``$COMPACTD_BIN``, then ``PATH``)
        and connects to its stdin/stdout. Raises `BinaryNotFound` when there is no binary.

        The daemon logs to its log file; its stderr carries only real errors, which go to the
        ``compactd`` logger (``stderr="log"``, the default) unless another `stderr` is given
        (``subprocess.DEVNULL``, a file, ...)."""
        proc = subprocess.Popen(
            [find_binary(bin), "stdio", *(args or [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr == "log" else stderr,
            env=env,
            bufsize=0,
        )
        forwarder: Optional[threading.Thread] = None
        if stderr == "log":
            forwarder = threading.Thread(target=_forward_stderr, args=(proc.stderr,), name="compactd-stderr", daemon=True)
            forwarder.start()

        def closer() -> None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(timeout=5)
            # Every line the daemon wrote to stderr is logged before `close` returns.
            if forwarder is not None:
                forwarder.join(timeout=5)

        client = cls(proc.stdout, proc.stdin, framing, closer)
        client.process = proc
        client.peer = Peer(None, proc.pid)
        return client

    @classmethod
    def connect(cls, path: Optional[str] = None, framing: str = "ndjson", timeout: float = 10.0) -> "Client":
        """Connects to a running ``compactd serve``: `path`, else the daemon's default socket
        (`default_socket_path`). Raises `DaemonNotRunning` when nothing listens there."""
        return cls.connect_socket(path or default_socket_path(), framing, timeout)

    @classmethod
    def connect_or_start(
        cls,
        path: Optional[str] = None,
        bin: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        framing: str = "ndjson",
        timeout: float = 10.0,
    ) -> "Client":
        """Connects to the daemon on `path` (default: its default socket), starting one in the
        background first when none answers (``compactd start``, as ``compactd connect`` does
        for editors), so an agent and an editor share one daemon and its sessions. Raises
        `BinaryNotFound` without a binary and `DaemonNotRunning` when it cannot start."""
        path = path or default_socket_path()
        try:
            return cls.connect_socket(path, framing, timeout)
        except DaemonNotRunning:
            pass
        started = subprocess.run(start_command(bin, path), stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=60)
        if started.returncode != 0:
            raise start_failed(path, started)
        return cls.connect_socket(path, framing, timeout)

    def forward_daemon_log(self) -> Callable[[], None]:
        """Sends the daemon's log lines to the ``compactd`` logger at their level (asks for
        ``window/logMessage`` notifications with ``initialize(log_notifications=True)``)."""
        remove = self.on("window/logMessage", log_message)
        self.initialize(log_notifications=True)
        return remove

    @classmethod
    def connect_socket(cls, path: str, framing: str = "ndjson", timeout: float = 10.0) -> "Client":
        """Connects to ``compactd serve --socket PATH``: only when the socket's directory and the
        daemon answering there are this user's own (`NotYourDaemon` otherwise)."""
        check_socket_dir(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise DaemonNotRunning(
                f"no compactd daemon listening on {path} ({e.strerror}); start one with `compactd serve`"
            ) from e
        try:
            check_peer(sock, path)
        except NotYourDaemon:
            sock.close()
            raise
        sock.settimeout(None)
        rfile = sock.makefile("rb", buffering=0)
        wfile = sock.makefile("wb", buffering=0)

        def closer() -> None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            wfile.close()
            rfile.close()
            sock.close()

        client = cls(rfile, wfile, framing, closer)
        client.peer = Peer(path, peer_pid(sock))
        return client

    # --- wire ----------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        """Writes bytes as they are (for tests of malformed input)."""
        with self._write_lock:
            self._wfile.write(data)
            self._wfile.flush()

    def send_message(self, msg: Dict[str, Any]) -> None:
        self.send_raw(encode_message(msg, self.framing))

    def _reply(self, msg: Dict[str, Any]) -> None:
        """Sends a reply to a server request; a connection closed meanwhile is not an error."""
        try:
            self.send_message(msg)
        except (OSError, ValueError):
            pass

    def _read_loop(self) -> None:
        try:
            while True:
                body = self._reader.read()
                if body is None:
                    break
                if self._reader.last_headers is not None:
                    self.raw_headers.append(self._reader.last_headers)
                try:
                    msg = json.loads(body.decode("utf-8"))
                except ValueError:
                    continue
                for m in msg if isinstance(msg, list) else [msg]:
                    if isinstance(m, dict):
                        self._dispatch(m)
        except (OSError, ValueError):
            pass
        finally:
            self.closed = True
            with self._pending_lock:
                pending, self._pending = self._pending, {}
                self._pending_sizes = {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("the daemon closed the connection"))
            with self._cond:
                self._cond.notify_all()
            self._fire("close", None)

    def _record(self, kind: str, msg: Any) -> None:
        with self._cond:
            self.received.append((kind, msg))
            self._cond.notify_all()

    def _dispatch(self, msg: Dict[str, Any]) -> None:
        if "method" in msg:
            if "id" in msg:
                self._record("request", msg)
                threading.Thread(target=self._answer_hook, args=(msg,), daemon=True).start()
            else:
                self._record("notification", msg)
                self._fire(msg["method"], msg.get("params"))
            return
        mid = msg.get("id")
        if mid is None and isinstance(msg.get("error"), dict):
            self._fail_unreadable(msg)
            return
        with self._pending_lock:
            fut = self._pending.pop(mid, None) if mid is not None else None
            self._pending_sizes.pop(mid, None)
        if fut is None:
            if "error" in msg:
                self.orphan_errors.append(msg)
            self._record("error" if "error" in msg else "response", msg)
            return
        self._record("response", msg)
        if "error" in msg:
            fut.set_exception(CompactdError.from_json(msg["error"], mid))
        else:
            fut.set_result(msg.get("result"))

    def _fail_unreadable(self, msg: Dict[str, Any]) -> None:
        """An error with a null id fails the waiting calls it can belong to
        (`unreadable_targets`); one that belongs to none is an orphan."""
        with self._pending_lock:
            targets = unreadable_targets(self._pending_sizes, msg["error"])
            futures = [self._pending.pop(mid, None) for mid in targets]
            for mid in targets:
                self._pending_sizes.pop(mid, None)
        self._record("error", msg)
        failed = [f for f in futures if f is not None and not f.done()]
        if not failed:
            self.orphan_errors.append(msg)
        for fut in failed:
            fut.set_exception(CompactdError.from_json(msg["error"], None))

    def _answer_hook(self, msg: Dict[str, Any]) -> None:
        params = msg.get("params") or {}
        handlers = [
            h
            for h in self._hooks.get(msg["method"], [])
            if h["session_id"] is None or h["session_id"] == params.get("sessionId")
        ]
        result: Any = None
        try:
            for h in handlers:
                r = h["fn"](params)
                if inspect.isawaitable(r):  # an async handler: run it on this thread's own loop
                    r = asyncio.run(_await(r))
                if r is NO_REPLY:
                    return
                if r:
                    result = r
                    if isinstance(r, dict) and r.get("cancel") is True:
                        break
        except Exception as e:  # a failing handler answers with an error
            self._reply({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32603, "message": str(e)}})
            return
        self._reply({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    def _fire(self, name: str, params: Any) -> None:
        # A failing callback is reported and skipped; it must not stop the reader thread.
        for cb in list(self._listeners.get(name, [])):
            try:
                cb(params)
            except Exception:
                traceback.print_exc()
        if name != "close":
            for cb in list(self._any_listeners):
                cb(name, params)

    # --- requests ------------------------------------------------------------------------

    def request_async(self, method: str, params: Optional[Dict[str, Any]] = None) -> Future:
        """Sends a request; the `Future` resolves to the result or raises `CompactdError`.
        Params JSON cannot carry (``NaN``, infinities) raise `NotJsonError` before anything
        is sent."""
        return self._send_request(method, params)[1]

    def _send_request(self, method: str, params: Optional[Dict[str, Any]]) -> "tuple[int, Future]":
        mid = next(self._ids)
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": mid, "method": method}
        if params is not None:
            msg["params"] = params
        body = encode_body(msg)
        fut: Future = Future()
        if self.closed:
            fut.set_exception(ConnectionClosed("the connection to the daemon is closed"))
            return mid, fut
        with self._pending_lock:
            self._pending[mid] = fut
            self._pending_sizes[mid] = len(body)
        try:
            self.send_raw(encode_frame(body, self.framing))
        except (OSError, ValueError) as e:
            self._forget(mid)
            raise ConnectionClosed(f"cannot write to the daemon: {e}") from e
        return mid, fut

    def _forget(self, mid: Any) -> None:
        with self._pending_lock:
            self._pending.pop(mid, None)
            self._pending_sizes.pop(mid, None)

    def request(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: Optional[float] = None) -> Any:
        """Sends a request and waits for its result; raises `CompactdError` on an error reply,
        and `DaemonNotAnswering` (a `TimeoutError` naming the socket and the daemon's pid)
        when no answer comes within `timeout` seconds (default: the client's `timeout`)."""
        mid, fut = self._send_request(method, params)
        wait = timeout if timeout is not None else self.timeout
        try:
            return fut.result(wait)
        except FutureTimeout:
            self._forget(mid)
            raise not_answering(self.peer, method, wait) from None

    def _call(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: Optional[float] = None) -> Any:
        return self.request(method, params, timeout)

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send_message(msg)

    # --- events --------------------------------------------------------------------------

    def on(self, name: str, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Calls ``callback(params)`` for each notification ``name`` (``compaction_start``,
        ``compaction_end``, ``session_compact``, ``$/cancelRequest``, ..., or ``close``).
        Returns a function that removes the callback. Events need ``subscribe`` first."""
        self._listeners.setdefault(name, []).append(callback)

        def remove() -> None:
            if callback in self._listeners.get(name, []):
                self._listeners[name].remove(callback)

        return remove

    def _add_any_listener(self, callback: Callable[[str, Any], None]) -> Callable[[], None]:
        self._any_listeners.append(callback)
        return lambda: callback in self._any_listeners and self._any_listeners.remove(callback)

    def events(self, names: Optional[Iterable[str]] = None, session_id: Optional[str] = None) -> EventStream:
        """An iterator of `Event` from now on (optionally only `names` / one session)."""
        return EventStream(self, names, session_id)

    def wait_for(self, predicate: Callable[[str, Dict[str, Any]], bool], timeout: float = 30.0):
        """Waits until a received message satisfies ``predicate(kind, msg)``; returns it."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: any(predicate(k, m) for k, m in self.received) or self.closed,
                timeout,
            )
            for k, m in self.received:
                if predicate(k, m):
                    return m
        raise TimeoutError("no matching message" if not ok else "connection closed")

    def notifications(self, method: str) -> List[Dict[str, Any]]:
        with self._cond:
            return [m["params"] for k, m in self.received if k == "notification" and m["method"] == method]

    # --- hooks ---------------------------------------------------------------------------

    def on_hook(
        self,
        hook: str,
        handler: Callable[[Dict[str, Any]], Any],
        session_id: Optional[str] = None,
        timeout_ms: Optional[int] = None,
    ) -> Any:
        """Registers ``handler`` locally and with ``registerHooks``. For request hooks
        (``session_before_compact``, ``session_before_tree``) its return value is the reply
        (``None``, ``{"cancel": True}``, ``{"compaction": {...}}``; ``NO_REPLY`` to never answer);
        for notification hooks it is called with the params."""
        if hook in REQUEST_HOOKS:
            self._hooks.setdefault(hook, []).append({"fn": handler, "session_id": session_id})
        else:
            self.on(hook, lambda p: (session_id is None or p.get("sessionId") == session_id) and handler(p))
        return self.register_hooks([hook], session_id, timeout_ms)

    #: The historical name.
    add_hook = on_hook

    def on_before_compact(self, handler, session_id=None, timeout_ms=None):
        return self.on_hook("session_before_compact", handler, session_id, timeout_ms)

    # --- teardown ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closer:
            closer, self._closer = self._closer, None
            closer()
        self._thread.join(timeout=5)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Client", "EventStream", "FrameReader", "encode_frame", "DEFAULT_TIMEOUT"]
