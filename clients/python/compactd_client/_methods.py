"""One typed Python method per protocol method, shared by `Client` and `AsyncClient`.

Each method only names the JSON-RPC method and maps its arguments to the params object
(arguments left at ``None`` are omitted), so adding a protocol method is one definition here.
`Client` returns the result; `AsyncClient` returns an awaitable of it. Results are the JSON
objects of proto-docs/methods.md, as dicts, annotated with the TypedDicts of `types.py`
(generated from openrpc.json; `tests/test_api.py` checks every annotation against it).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._wire import params as _p
from .types import (  # noqa: F401 - the annotations name them
    AbortCompactionResult,
    AppendResult,
    Branch,
    CheckCompactionResult,
    CloseSessionResult,
    CompactionResult,
    Context,
    ContextUsage,
    CostReport,
    EditSummaryResult,
    EffectiveSettings,
    HistoryHits,
    InitializeResult,
    NavigateTreeResult,
    PinResult,
    Pins,
    PreviewCompactionResult,
    RegisterHooksResult,
    SessionEntry,
    SessionInfo,
    SessionInfoList,
    StoredSessions,
    SetModelResult,
    SetSettingsOverridesResult,
    ShouldCompactResult,
    SubscribeResult,
    SyncSessionResult,
    UndoCompactionResult,
    UnpinResult,
    UnsubscribeResult,
)

JSON = Dict[str, Any]
#: How long a compaction may take by default (a real summarizer model can be slow), seconds.
COMPACT_TIMEOUT = 600.0


class Methods:
    """The protocol, method by method (names in snake_case, params as in the protocol)."""

    def _call(self, method: str, params: Optional[JSON] = None, timeout: Optional[float] = None) -> Any:
        raise NotImplementedError

    # Session lifecycle
    def initialize(self, client_name: str = "compactd_client", capabilities: Any = None, log_notifications: Optional[bool] = None) -> InitializeResult:
        """``log_notifications=True``: the daemon's log lines arrive as ``window/logMessage``
        notifications (``on("window/logMessage", cb)``; `forward_daemon_log` logs them)."""
        return self._call("initialize", _p(clientName=client_name, capabilities=capabilities, logNotifications=log_notifications))

    def open_session(self, path: Optional[str] = None, create: Optional[bool] = None, cwd: Optional[str] = None, model: Optional[JSON] = None, thinking_level: Optional[str] = None, header_id: Optional[str] = None) -> SessionInfo:
        """A session file by ``path``, or (postgres backend) a stored session by ``header_id``."""
        return self._call("openSession", _p(path=path, headerId=header_id, create=create, cwd=cwd, model=model, thinkingLevel=thinking_level))

    def create_session(self, cwd: str, session_dir: Optional[str] = None, model: Optional[JSON] = None, thinking_level: Optional[str] = None) -> SessionInfo:
        return self._call("createSession", _p(cwd=cwd, sessionDir=session_dir, model=model, thinkingLevel=thinking_level))

    def close_session(self, session_id: str) -> CloseSessionResult:
        return self._call("closeSession", _p(sessionId=session_id))

    def list_sessions(self) -> SessionInfoList:
        return self._call("listSessions", {})

    def list_stored_sessions(self, cwd: Optional[str] = None) -> StoredSessions:
        """Beyond Pi (postgres backend): the shared store's sessions, newest first."""
        return self._call("listStoredSessions", _p(cwd=cwd))

    # Entries
    def append_message(self, session_id: str, message: JSON, expected_leaf_id: Optional[str] = None, entry_id: Optional[str] = None) -> AppendResult:
        return self._call("appendMessage", _p(sessionId=session_id, message=message, expectedLeafId=expected_leaf_id, entryId=entry_id))

    def append_entry(self, session_id: str, entry: JSON, expected_leaf_id: Optional[str] = None, entry_id: Optional[str] = None) -> AppendResult:
        return self._call("appendEntry", _p(sessionId=session_id, entry=entry, expectedLeafId=expected_leaf_id, entryId=entry_id))

    def set_model(self, session_id: str, model: JSON) -> SetModelResult:
        return self._call("setModel", _p(sessionId=session_id, model=model))

    def navigate_tree(self, session_id: str, target_id: Optional[str] = None, summarize: Optional[bool] = None, custom_instructions: Optional[str] = None, replace_instructions: Optional[bool] = None, label: Optional[str] = None, timeout: float = COMPACT_TIMEOUT) -> NavigateTreeResult:
        return self._call("navigateTree", _p(sessionId=session_id, targetId=target_id, summarize=summarize, customInstructions=custom_instructions, replaceInstructions=replace_instructions, label=label), timeout)

    def get_branch(self, session_id: str) -> Branch:
        return self._call("getBranch", _p(sessionId=session_id))

    def get_context(self, session_id: str, format: Optional[str] = None) -> Context:
        return self._call("getContext", _p(sessionId=session_id, format=format))

    # Compaction
    def get_context_usage(self, session_id: str) -> ContextUsage:
        return self._call("getContextUsage", _p(sessionId=session_id))

    def should_compact(self, session_id: Optional[str] = None, context_tokens: Optional[float] = None, context_window: Optional[int] = None, settings: Optional[JSON] = None) -> ShouldCompactResult:
        return self._call("shouldCompact", _p(sessionId=session_id, contextTokens=context_tokens, contextWindow=context_window, settings=settings))

    def preview_compaction(self, session_id: str, detail: Optional[str] = None) -> PreviewCompactionResult:
        return self._call("previewCompaction", _p(sessionId=session_id, detail=detail))

    def compact(self, session_id: str, custom_instructions: Optional[str] = None, write: Optional[bool] = None, timeout: float = COMPACT_TIMEOUT) -> CompactionResult:
        return self._call("compact", _p(sessionId=session_id, customInstructions=custom_instructions, write=write), timeout)

    def check_compaction(self, session_id: str, phase: str, timeout: float = COMPACT_TIMEOUT) -> CheckCompactionResult:
        return self._call("checkCompaction", _p(sessionId=session_id, phase=phase), timeout)

    def abort_compaction(self, session_id: str) -> AbortCompactionResult:
        return self._call("abortCompaction", _p(sessionId=session_id))

    # Beyond Pi: recall, pins, undo and edit
    def search_history(self, session_id: str, query: str, regex: Optional[bool] = None, limit: Optional[int] = None) -> HistoryHits:
        return self._call("searchHistory", _p(sessionId=session_id, query=query, regex=regex, limit=limit))

    def get_entry(self, session_id: str, entry_id: str) -> SessionEntry:
        return self._call("getEntry", _p(sessionId=session_id, entryId=entry_id))

    def pin(self, session_id: str, text: str, label: Optional[str] = None) -> PinResult:
        return self._call("pin", _p(sessionId=session_id, text=text, label=label))

    def unpin(self, session_id: str, pin_id: str) -> UnpinResult:
        return self._call("unpin", _p(sessionId=session_id, pinId=pin_id))

    def list_pins(self, session_id: str) -> Pins:
        return self._call("listPins", _p(sessionId=session_id))

    def undo_compaction(self, session_id: str) -> UndoCompactionResult:
        return self._call("undoCompaction", _p(sessionId=session_id))

    def edit_summary(self, session_id: str, summary: str) -> EditSummaryResult:
        return self._call("editSummary", _p(sessionId=session_id, summary=summary))

    def get_cost_report(self, session_id: str) -> CostReport:
        """Beyond Pi: what the session spent (replies, compactions, speculations, cache rewrites)."""
        return self._call("getCostReport", _p(sessionId=session_id))

    def sync_session(self, session_id: str) -> SyncSessionResult:
        """Beyond Pi: read lines another writer appended to the file; may start a speculation."""
        return self._call("syncSession", _p(sessionId=session_id))

    # Settings
    def get_settings(self, session_id: str) -> EffectiveSettings:
        return self._call("getSettings", _p(sessionId=session_id))

    def set_settings_overrides(self, session_id: Optional[str] = None, compaction: Optional[JSON] = None) -> SetSettingsOverridesResult:
        return self._call("setSettingsOverrides", _p(sessionId=session_id, compaction=compaction))

    # Events and hooks (see also `on`, `events` and `on_hook`)
    def subscribe(self, session_id: Optional[str] = None, events: Optional[List[str]] = None) -> SubscribeResult:
        return self._call("subscribe", _p(sessionId=session_id, events=events))

    def unsubscribe(self) -> UnsubscribeResult:
        return self._call("unsubscribe", {})

    def register_hooks(self, hooks: List[str], session_id: Optional[str] = None, timeout_ms: Optional[int] = None) -> RegisterHooksResult:
        return self._call("registerHooks", _p(hooks=hooks, sessionId=session_id, timeoutMs=timeout_ms))

