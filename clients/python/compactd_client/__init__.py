"""A dependency-free Python client for the compactd daemon (JSON-RPC 2.0).

`Client` is blocking (a reader thread underneath), `AsyncClient` is asyncio; both have one
typed method per protocol method (``open_session``, ``compact``, ``check_compaction``, ...),
events as callbacks and iterators, and hooks as (async) callbacks. Results are plain dicts typed
by the TypedDicts of `compactd_client.types` (generated from the protocol's OpenRPC document).
Errors are `CompactdError` with ``code``, ``kind`` and ``message``.
"""

from . import types
from ._methods import Methods
from ._wire import (
    DAEMON_LOG,
    ERROR_CODES,
    NO_REPLY,
    BinaryNotFound,
    CompactdError,
    ConnectionClosed,
    DaemonNotAnswering,
    DaemonNotRunning,
    NotJsonError,
    NotYourDaemon,
    Event,
    RpcError,
    default_socket_path,
    encode_frame,
    find_binary,
)
from .aio import AsyncClient, AsyncEventStream
from .client import Client, EventStream, FrameReader

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncEventStream",
    "BinaryNotFound",
    "Client",
    "CompactdError",
    "ConnectionClosed",
    "DAEMON_LOG",
    "DaemonNotAnswering",
    "DaemonNotRunning",
    "NotJsonError",
    "NotYourDaemon",
    "ERROR_CODES",
    "Event",
    "EventStream",
    "FrameReader",
    "Methods",
    "NO_REPLY",
    "RpcError",
    "default_socket_path",
    "encode_frame",
    "find_binary",
    "types",
]
