"""What the blocking and the asyncio client share: framing, errors, and where the daemon is.

Kept free of any I/O model so both clients encode, decode and fail the same way.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import shutil
import socket
import stat
import struct
import subprocess
from typing import Any, Dict, Iterable, List, NamedTuple, Optional

from .types import ERROR_CODES, REQUEST_HOOKS  # noqa: F401 - generated from openrpc.json, re-exported


class CompactdError(Exception):
    """A JSON-RPC error reply: `code`, `kind` (`error.data.kind`, e.g. ``"already_compacted"``)
    and `message` (Pi's own text where Pi has one, e.g. ``"Already compacted"``)."""

    def __init__(self, code: int, message: str, data: Any = None, id: Any = None):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data
        self.id = id
        self.kind: Optional[str] = data.get("kind") if isinstance(data, dict) else None

    @classmethod
    def from_json(cls, obj: Dict[str, Any], id: Any = None) -> "CompactdError":
        return cls(obj.get("code", 0), obj.get("message", ""), obj.get("data"), id)


#: The historical name.
RpcError = CompactdError


class ConnectionClosed(ConnectionError):
    """The daemon closed the connection before answering."""


class BinaryNotFound(FileNotFoundError):
    """No compactd executable: neither ``$COMPACTD_BIN`` nor ``compactd`` on ``PATH``."""


class DaemonNotRunning(ConnectionError):
    """Nothing listens on the socket ``Client.connect()`` tried."""


class NotYourDaemon(PermissionError):
    """The socket is not the user's own: its directory is another user's or open to others, or
    the daemon answering there runs as another user. Never joined (and never replaced by a
    started one): what a client sends would go to that user."""


class DaemonNotAnswering(TimeoutError):
    """The daemon accepted the request but sent no answer within the call's timeout: it is
    stopped (``SIGSTOP``: the kernel still accepts connections for it) or wedged. The message
    names the socket and the daemon's pid where known (`socket`, `pid`)."""

    def __init__(self, message: str, socket: Optional[str] = None, pid: Optional[int] = None, method: Optional[str] = None):
        super().__init__(message)
        self.socket = socket
        self.pid = pid
        self.method = method


class NotJsonError(ValueError):
    """A value in a request that JSON cannot carry (``NaN``, ``Infinity``, ``-Infinity``):
    refused before anything is sent, naming where it is (``params.message.usage.cost``).
    Python's ``json`` would write ``NaN``, which is not JSON: the daemon could only answer a
    parse error that names no request."""


class Peer(NamedTuple):
    """Who answers on the other end, for messages: the socket (``None`` for ``compactd stdio``)
    and the daemon's pid (``None`` where the system does not tell)."""

    socket: Optional[str]
    pid: Optional[int]

    def describe(self) -> str:
        where = f"the daemon on {self.socket}" if self.socket else "the daemon"
        return f"{where} (pid {self.pid})" if self.pid is not None else where


def not_answering(peer: Peer, method: str, timeout: Optional[float]) -> DaemonNotAnswering:
    """The error of a call that got no answer within `timeout` seconds."""
    hint = (
        f"it may be stopped (resume it with `kill -CONT {peer.pid}`) or wedged (`kill {peer.pid}` ends it)"
        if peer.pid is not None
        else "it may be stopped or wedged"
    )
    return DaemonNotAnswering(
        f"{peer.describe()} did not answer `{method}` within {timeout:g} s: {hint}",
        peer.socket,
        peer.pid,
        method,
    )


def unreadable_targets(sizes: Dict[Any, int], error: Any) -> List[Any]:
    """The waiting calls an error reply with a null id can belong to. Such a reply answers a
    frame the daemon could not read an id from (not JSON, over its size limit, skipped for
    lack of buffer); the daemon names that frame's size in ``data.frameBytes``, so it belongs
    to the calls whose request frame had that size (`sizes`: id → size). A daemon that names
    no size leaves every waiting call a candidate."""
    data = error.get("data") if isinstance(error, dict) else None
    size = data.get("frameBytes") if isinstance(data, dict) else None
    if not isinstance(size, int):
        return list(sizes)
    return [mid for mid, n in sizes.items() if n == size]


class Event(NamedTuple):
    """One event notification: its name (``"compaction_end"``) and params (with ``sessionId``)."""

    name: str
    params: Dict[str, Any]


class _NoReply:
    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "NO_REPLY"


#: Returned by a hook handler to leave the daemon's request unanswered (it then times out).
NO_REPLY = _NoReply()


def find_binary(bin: Optional[str] = None) -> str:
    """The compactd executable: `bin`, else ``$COMPACTD_BIN``, else ``compactd`` on ``PATH``."""
    candidate = bin or os.environ.get("COMPACTD_BIN")
    if candidate:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        found = shutil.which(candidate)
        if found:
            return found
        raise BinaryNotFound(f"compactd binary not found or not executable: {candidate}")
    found = shutil.which("compactd")
    if found:
        return found
    raise BinaryNotFound(
        "compactd binary not found: set COMPACTD_BIN to its path or put `compactd` on PATH "
        "(e.g. `cargo install --path .` in the compactd checkout)"
    )


def runtime_dir():
    """The per-user runtime directory of the default socket, by the daemon's rule (Rust:
    ``transport::unix::runtime_dir``): ``$COMPACTD_RUNTIME_DIR``, else ``/run/user/<uid>`` when it
    is a directory of this user, else ``$XDG_RUNTIME_DIR``; ``None`` when none applies. The
    standard directory comes before the variable because hosts (MCP hosts, service managers,
    editors) start their children with a reduced environment that drops it."""
    explicit = os.environ.get("COMPACTD_RUNTIME_DIR")
    if explicit:
        return explicit
    standard = f"/run/user/{os.getuid()}"
    try:
        st = os.lstat(standard)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            return standard
    except OSError:
        pass
    return os.environ.get("XDG_RUNTIME_DIR") or None


def default_socket_path() -> str:
    """Where ``compactd serve`` listens by default, as the daemon computes it:
    ``<runtime_dir()>/compactd/compactd.sock``, else ``/tmp/compactd-<uid>/compactd.sock``."""
    runtime = runtime_dir()
    if runtime:
        return os.path.join(runtime, "compactd", "compactd.sock")
    return os.path.join("/tmp", f"compactd-{os.getuid()}", "compactd.sock")


def default_socket_dir() -> str:
    """The directory of `default_socket_path`, which must be private (see `check_socket_dir`)."""
    return os.path.dirname(default_socket_path())


def check_socket_dir(path: str) -> None:
    """Checks the directory of the socket `path` before connecting to anything in it, by the
    rule ``compactd serve`` applies before binding there (Rust: ``transport::unix::
    check_socket_dir``). A directory that does not exist holds no daemon to join. The default
    socket's directory (`default_socket_dir`) must be a real directory of this user with no
    access for group or others; another directory (an explicit ``--socket``), after links, must
    be this user's or root's and, when group or others may write to it, sticky (as /tmp).
    Raises `NotYourDaemon` naming the directory and its owner."""
    d = os.path.dirname(path) or "."
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return
    uid = os.getuid()
    private = pathlib.PurePath(d) == pathlib.PurePath(default_socket_dir())
    if stat.S_ISLNK(st.st_mode):
        if private:
            raise NotYourDaemon(f"refusing socket directory {d}: it is a symbolic link")
        st = os.stat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise NotYourDaemon(f"refusing socket directory {d}: not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if private:
        if st.st_uid != uid:
            raise NotYourDaemon(
                f"refusing socket directory {d}: owned by uid {st.st_uid}, not by this user (uid {uid}); "
                "another user may have created it to intercept clients"
            )
        if mode & 0o077:
            raise NotYourDaemon(
                f"refusing socket directory {d}: mode {mode:04o} lets other users in "
                "(expected 0700; fix it with chmod 700 or remove it)"
            )
    else:
        if st.st_uid not in (uid, 0):
            raise NotYourDaemon(
                f"refusing socket directory {d}: owned by uid {st.st_uid}, neither this user (uid {uid}) nor root"
            )
        if mode & 0o022 and not mode & stat.S_ISVTX:
            raise NotYourDaemon(
                f"refusing socket directory {d}: mode {mode:04o} lets other users replace the socket (not sticky)"
            )


def peer_pid(sock: Any) -> Optional[int]:
    """The pid of the process listening at the other end of the connected Unix socket `sock`
    (``SO_PEERCRED``; ``None`` where the socket module has none)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", creds)[0] or None


def peer_uid(sock: Any, path: str) -> int:
    """The user id of the process at the other end of the connected Unix socket `sock`
    (``SO_PEERCRED``, Linux: ``struct ucred`` is three ints, pid, uid, gid). Where the socket
    module has no ``SO_PEERCRED`` (macOS), the socket file's owner stands in for it."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    return os.stat(path).st_uid


def check_peer(sock: Any, path: str) -> None:
    """Refuses a daemon another user runs (`NotYourDaemon`, naming the socket and the uid): its
    clients' bytes (sessions, keys in prompts) would go to that user."""
    uid = os.getuid()
    try:
        peer = peer_uid(sock, path)
    except OSError as e:
        raise NotYourDaemon(f"cannot tell who runs the daemon on {path}: {e}") from e
    if peer != uid:
        raise NotYourDaemon(
            f"refusing the daemon on {path}: it runs as uid {peer}, not as this user (uid {uid}); "
            "another user may be listening there to intercept clients"
        )


def encode_frame(body: bytes, framing: str) -> bytes:
    """One message as bytes on the wire."""
    if framing == "lsp":
        return b"Content-Length: %d\r\n\r\n" % len(body) + body
    if framing == "ndjson":
        return body + b"\n"
    raise ValueError(f"unknown framing {framing!r}")


def _non_finite(value: Any, path: str) -> Optional[str]:
    """Where in `value` a float JSON cannot carry is (``NaN``, an infinity), and how it reads:
    ``"params.usage.cost is NaN"``; ``None`` when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"{path} is {text}"
    if isinstance(value, dict):
        items: Iterable[Any] = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, v in items:
        found = _non_finite(v, where)
        if found:
            return found
    return None


def encode_body(msg: Dict[str, Any]) -> bytes:
    """One message as UTF-8 JSON. ``NaN`` and infinities are refused (`NotJsonError`, naming
    where they are) instead of being written as the non-JSON ``NaN``."""
    try:
        text = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        what = _non_finite(msg.get("params"), "params") or "a number is not finite"
        raise NotJsonError(f"{what}, which JSON cannot carry: send a finite number or null") from e
    return text.encode("utf-8")


def encode_message(msg: Dict[str, Any], framing: str) -> bytes:
    return encode_frame(encode_body(msg), framing)


def content_length(header_line: bytes) -> Optional[int]:
    """The value of a ``Content-Length`` header line, ``None`` for any other header."""
    name, sep, value = header_line.partition(b":")
    if not sep:
        raise ValueError(f"malformed header line: {header_line!r}")
    if name.strip().lower() == b"content-length":
        return int(value.strip())
    return None


def params(**kw: Any) -> Dict[str, Any]:
    """A params object without the arguments left at ``None``."""
    return {k: v for k, v in kw.items() if v is not None}


#: The logger the daemon's stderr (only real errors) and its log notifications go to.
DAEMON_LOG = logging.getLogger("compactd")

#: LSP's MessageType of `window/logMessage` as a logging level.
LOG_LEVELS = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG}


def log_stderr_line(line: bytes) -> None:
    """One line of the daemon's stderr, which carries only real errors, to `DAEMON_LOG`."""
    text = line.decode("utf-8", "replace").rstrip()
    if text:
        DAEMON_LOG.error("%s", text)


def log_message(params: Any) -> None:
    """A ``window/logMessage`` notification to `DAEMON_LOG` at its level."""
    if isinstance(params, dict):
        DAEMON_LOG.log(LOG_LEVELS.get(params.get("type"), logging.INFO), "%s", params.get("message", ""))


def start_command(bin: Optional[str], path: str) -> List[str]:
    """``compactd start --socket PATH``: starts the daemon in the background unless one answers."""
    return [find_binary(bin), "start", "--socket", path]


def start_failed(path: str, result: "subprocess.CompletedProcess[bytes]") -> "DaemonNotRunning":
    why = (result.stderr or b"").decode("utf-8", "replace").strip() or f"exit status {result.returncode}"
    return DaemonNotRunning(f"could not start a compactd daemon on {path}: {why}")
