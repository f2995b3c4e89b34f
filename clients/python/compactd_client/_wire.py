"""What the blocking and the asyncio client share: framing, errors, and where the daemon is.

Kept free of any I/O model so both clients encode, decode and fail the same way.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from typing import Any, Dict, List, NamedTuple, Optional

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


def default_socket_path() -> str:
    """Where ``compactd serve`` listens by default: ``$XDG_RUNTIME_DIR/compactd/compactd.sock``,
    else ``$TMPDIR`` (or ``/tmp``) ``/compactd-<uid>/compactd.sock``, as the daemon computes it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "compactd", "compactd.sock")
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, f"compactd-{os.getuid()}", "compactd.sock")


def encode_frame(body: bytes, framing: str) -> bytes:
    """One message as bytes on the wire."""
    if framing == "lsp":
        return b"Content-Length: %d\r\n\r\n" % len(body) + body
    if framing == "ndjson":
        return body + b"\n"
    raise ValueError(f"unknown framing {framing!r}")


def encode_message(msg: Dict[str, Any], framing: str) -> bytes:
    body = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return encode_frame(body, framing)


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
