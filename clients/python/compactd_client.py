"""A dependency-free Python 3 client for the compactd daemon (JSON-RPC 2.0).

Two framings, as the daemon detects them per connection from the first byte:

* ``"lsp"``: ``Content-Length: N\\r\\n\\r\\n`` followed by N bytes of UTF-8 JSON, exactly what
  Neovim's ``vim.lsp.rpc`` writes (and how it reads: headers are ``Name: value`` lines, matched
  case-insensitively, ended by an empty line; only ``Content-Length`` matters);
* ``"ndjson"``: one JSON message per line.

Transports: ``Client.spawn_stdio()`` runs ``compactd stdio`` (LSP framing by default, as an editor
would) and ``Client.connect_socket()`` talks to ``compactd serve --socket PATH`` (NDJSON by
default). One background thread reads frames; requests block the caller (``request``) or return a
``concurrent.futures.Future`` (``request_async``). Event notifications go to callbacks registered
with ``on()``; server-to-client hook requests go to handlers registered with ``add_hook()``.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import socket
import subprocess
import threading
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional

__all__ = [
    "Client",
    "RpcError",
    "NO_REPLY",
    "ERROR_CODES",
    "encode_frame",
    "FrameReader",
]

ERROR_CODES = {
    "parse_error": -32700,
    "invalid_request": -32600,
    "method_not_found": -32601,
    "invalid_params": -32602,
    "internal": -32603,
    "unknown_session": -32001,
    "not_found": -32002,
    "invalid_session_file": -32003,
    "locked": -32004,
    "nothing_to_compact": -32010,
    "already_compacted": -32011,
    "cancelled": -32012,
    "summarization_failed": -32013,
    "no_model": -32014,
    "auth": -32015,
    "compacting": -32020,
    "leaf_moved": -32021,
    "entry_not_found": -32022,
    "io": -32030,
    "overloaded": -32040,
    "request_cancelled": -32800,
}


class _NoReply:
    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "NO_REPLY"


#: Returned by a hook handler to leave the daemon's request unanswered (it then times out).
NO_REPLY = _NoReply()


class RpcError(Exception):
    """A JSON-RPC error response."""

    def __init__(self, code: int, message: str, data: Any = None, id: Any = None):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data
        self.id = id

    @classmethod
    def from_json(cls, obj: Dict[str, Any], id: Any = None) -> "RpcError":
        return cls(obj.get("code", 0), obj.get("message", ""), obj.get("data"), id)


class ConnectionClosed(Exception):
    """The daemon closed the connection before answering."""


def encode_frame(body: bytes, framing: str) -> bytes:
    """One message as bytes on the wire."""
    if framing == "lsp":
        return b"Content-Length: %d\r\n\r\n" % len(body) + body
    if framing == "ndjson":
        return body + b"\n"
    raise ValueError(f"unknown framing {framing!r}")


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
            name, sep, value = stripped.partition(b":")
            if not sep:
                raise ValueError(f"malformed header line: {stripped!r}")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        self.last_headers = raw
        body = b""
        while len(body) < length:
            chunk = self.rfile.read(length - len(body))
            if not chunk:
                return None
            body += chunk
        return body


class Client:
    """One JSON-RPC connection to compactd."""

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
        self._pending_lock = threading.Lock()
        self._listeners: Dict[str, List[Callable[[Any], None]]] = {}
        self._hooks: Dict[str, List[Dict[str, Any]]] = {}
        self._cond = threading.Condition()
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
        stderr=subprocess.DEVNULL,
    ) -> "Client":
        """Spawns ``compactd stdio [args]`` and connects to its stdin/stdout."""
        bin = bin or os.environ.get("COMPACTD_BIN") or "compactd"
        try:
            proc = subprocess.Popen(
                [bin, "stdio", *(args or [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env,
                bufsize=0,
            )
        except FileNotFoundError:
            raise FileNotFoundError(
                f"compactd binary not found: {bin!r}. Set COMPACTD_BIN to its path, or install it "
                "on PATH with `cargo install --path .` in the compactd checkout"
            ) from None

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

        client = cls(proc.stdout, proc.stdin, framing, closer)
        client.process = proc
        return client

    @classmethod
    def connect_socket(cls, path: str, framing: str = "ndjson", timeout: float = 60.0) -> "Client":
        """Connects to ``compactd serve --socket PATH``."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(path)
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

        return cls(rfile, wfile, framing, closer)

    # --- wire ----------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        """Writes bytes as they are (for tests of malformed input)."""
        with self._write_lock:
            self._wfile.write(data)
            self._wfile.flush()

    def send_message(self, msg: Dict[str, Any]) -> None:
        body = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.send_raw(encode_frame(body, self.framing))

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
                    self._dispatch(m)
        except (OSError, ValueError):
            pass
        finally:
            self.closed = True
            with self._pending_lock:
                pending, self._pending = self._pending, {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("connection closed"))
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
        with self._pending_lock:
            fut = self._pending.pop(mid, None) if mid is not None else None
        if fut is None:
            if "error" in msg:
                self.orphan_errors.append(msg)
            self._record("error" if "error" in msg else "response", msg)
            return
        self._record("response", msg)
        if "error" in msg:
            fut.set_exception(RpcError.from_json(msg["error"], mid))
        else:
            fut.set_result(msg.get("result"))

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
        for cb in list(self._listeners.get(name, [])):
            cb(params)

    # --- requests ------------------------------------------------------------------------

    def request_async(self, method: str, params: Optional[Dict[str, Any]] = None) -> Future:
        mid = next(self._ids)
        fut: Future = Future()
        with self._pending_lock:
            self._pending[mid] = fut
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": mid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_message(msg)
        return fut

    def request(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: float = 60.0) -> Any:
        """Sends a request and waits for its result; raises ``RpcError`` on an error reply."""
        return self.request_async(method, params).result(timeout)

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send_message(msg)

    # --- events --------------------------------------------------------------------------

    def on(self, name: str, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Calls ``callback(params)`` for each notification ``name`` (``compaction_start``,
        ``compaction_end``, ``session_compact``, ``$/cancelRequest``, ..., or ``close``)."""
        self._listeners.setdefault(name, []).append(callback)
        return lambda: self._listeners[name].remove(callback)

    def wait_for(self, predicate: Callable[[str, Dict[str, Any]], bool], timeout: float = 30.0):
        """Waits until a received message satisfies ``predicate(kind, msg)``; returns it."""
        with self._cond:
            seen = 0
            ok = self._cond.wait_for(
                lambda: any(predicate(k, m) for k, m in self.received[seen:]) or self.closed,
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

    def add_hook(
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
        if hook in ("session_before_compact", "session_before_tree"):
            self._hooks.setdefault(hook, []).append({"fn": handler, "session_id": session_id})
        else:
            self.on(hook, lambda p: (session_id is None or p.get("sessionId") == session_id) and handler(p))
        params: Dict[str, Any] = {"hooks": [hook]}
        if session_id is not None:
            params["sessionId"] = session_id
        if timeout_ms is not None:
            params["timeoutMs"] = timeout_ms
        return self.request("registerHooks", params)

    def on_before_compact(self, handler, session_id=None, timeout_ms=None):
        return self.add_hook("session_before_compact", handler, session_id, timeout_ms)

    # --- typed-ish helpers ---------------------------------------------------------------

    @staticmethod
    def _p(**kw) -> Dict[str, Any]:
        return {k: v for k, v in kw.items() if v is not None}

    def initialize(self, client_name: str = "compactd_client.py") -> Dict[str, Any]:
        return self.request("initialize", {"clientName": client_name})

    def open_session(self, path, create=None, cwd=None, model=None, thinking_level=None) -> Dict[str, Any]:
        return self.request(
            "openSession", self._p(path=path, create=create, cwd=cwd, model=model, thinkingLevel=thinking_level)
        )

    def close_session(self, session_id: str) -> Dict[str, Any]:
        return self.request("closeSession", {"sessionId": session_id})

    def list_sessions(self) -> List[Dict[str, Any]]:
        return self.request("listSessions", {})

    def append_message(self, session_id: str, message: Dict[str, Any], expected_leaf_id=None):
        return self.request(
            "appendMessage", self._p(sessionId=session_id, message=message, expectedLeafId=expected_leaf_id)
        )

    def get_context(self, session_id: str, format: Optional[str] = None):
        return self.request("getContext", self._p(sessionId=session_id, format=format))

    def get_context_usage(self, session_id: str):
        return self.request("getContextUsage", {"sessionId": session_id})

    def preview_compaction(self, session_id: str, detail: Optional[str] = None):
        return self.request("previewCompaction", self._p(sessionId=session_id, detail=detail))

    def compact(self, session_id: str, custom_instructions: Optional[str] = None, timeout: float = 120.0):
        return self.request(
            "compact", self._p(sessionId=session_id, customInstructions=custom_instructions), timeout
        )

    def check_compaction(self, session_id: str, phase: str):
        return self.request("checkCompaction", {"sessionId": session_id, "phase": phase}, 120.0)

    def abort_compaction(self, session_id: str):
        return self.request("abortCompaction", {"sessionId": session_id})

    def set_settings_overrides(self, session_id: Optional[str] = None, compaction: Any = None):
        return self.request("setSettingsOverrides", self._p(sessionId=session_id, compaction=compaction))

    def subscribe(self, session_id: Optional[str] = None, events: Optional[List[str]] = None):
        return self.request("subscribe", self._p(sessionId=session_id, events=events))

    def unsubscribe(self):
        return self.request("unsubscribe", {})

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
