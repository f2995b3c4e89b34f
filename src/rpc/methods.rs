//! The protocol's methods, each declared once: wire name, handler, params type, result type,
//! how it runs, whether it acts on one session, the errors it may return, and its summary.
//!
//! Everything else follows from this one list, in the style of codex-rs's
//! `client_request_definitions!`:
//! - [`METHODS`], the flags the connection loop reads ([`Run`], [`Scope`]);
//! - the dispatch table (`crate::transport::dispatch`), which parses the params type, calls the
//!   handler and serializes the result type, so a handler returning anything else is a compile
//!   error;
//! - the OpenRPC document (`super::openrpc`), whose params and result schemas are derived from
//!   the same two types.
//!
//! Adding a method means writing its params and result types (`super::types`,
//! `super::results`), one line below, and the handler. The handler is named by its path under
//! `crate::daemon`; only the dispatch table resolves it, so this layer never calls the daemon.

use serde_json::Value;

use super::errors::ErrorKind;
use super::schemas::Schemas;

/// How the connection runs a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// Answers at once; the connection runs it inline, in arrival order.
    Inline,
    /// Inline, in arrival order, as [`Run::Inline`], but awaited: where it waits on the
    /// storage (a database round trip), the connection's task waits without holding one of
    /// the daemon's worker threads, which serve other connections meanwhile.
    Awaited,
    /// May wait a long time (LLM calls, hooks): the connection runs it in its own task so it
    /// keeps reading (an abort, or the answer to a hook request, must get through).
    Task,
}

/// What a method acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The one session its required `sessionId` names. For a method run in a task, a client's
    /// `$/cancelRequest`, or its disconnect, aborts that session's running work.
    Session,
    /// The daemon or the connection.
    Global,
    /// The daemon or the connection, narrowed to one session when its optional `sessionId`
    /// names one (which the request's log span then carries).
    Narrowed,
}

/// One method, as the list declares it.
pub struct MethodSpec {
    pub name: &'static str,
    pub summary: &'static str,
    pub run: Run,
    pub scope: Scope,
    pub errors: &'static [ErrorKind],
    /// The result type's name in the OpenRPC document.
    pub result_name: &'static str,
    /// One content descriptor per field of the params type.
    pub params_schema: fn(&mut Schemas) -> Vec<Value>,
    /// The result type's schema (a `$ref` for named types).
    pub result_schema: fn(&mut Schemas) -> Value,
}

/// Calls `$then!` with every method, one per line:
/// `/// summary` then `"wireName" => handler_path(Params) -> Result, run, scope, [errors];`
macro_rules! for_each_method {
    ($then:ident) => {
        $then! {
            /// Optional handshake: server name, version, protocol version and capabilities.
            /// Registers nothing.
            "initialize" => handlers::sessions::initialize(InitializeParams) -> InitializeResult,
                Inline, Global, [InvalidParams];
            /// Opens (Pi's resume) or, with `create`, creates a session file; takes a hold on
            /// it for this connection. With the postgres backend (beyond Pi), opens a stored
            /// session by `headerId` instead, on any daemon of the store.
            "openSession" => handlers::sessions::open_session(OpenSessionParams) -> SessionInfo,
                Inline, Global, [InvalidParams, NotFound, InvalidSessionFile, Locked, NotRegularFile, TooLarge, PathNotAllowed, FileBusy, Io, StorageUnavailable];
            /// Pi's new session (deferred: nothing is on disk until the first assistant
            /// message). With the postgres backend (beyond Pi), stored at once and addressed by
            /// its `headerId`.
            "createSession" => handlers::sessions::create_session(CreateSessionParams) -> SessionInfo,
                Inline, Global, [InvalidParams, Locked, PathNotAllowed, Io, StorageUnavailable];
            /// Beyond Pi: the sessions in the shared store (postgres backend), newest first,
            /// optionally of one working directory.
            "listStoredSessions" => handlers::sessions::list_stored_sessions(ListStoredSessionsParams) -> StoredSessions,
                Inline, Global, [InvalidParams, StorageUnavailable];
            /// Releases this connection's hold; the last release aborts a running compaction
            /// and forgets the session.
            "closeSession" => handlers::sessions::close_session(SessionParams) -> CloseSessionResult,
                Inline, Session, [InvalidParams, UnknownSession];
            /// The sessions open in this daemon (not a scan of the sessions directory), sorted
            /// by sessionId.
            "listSessions" => handlers::sessions::list_sessions(NoParams) -> SessionInfoList,
                Inline, Global, [];
            /// Appends an AgentMessage (user, assistant, toolResult, bashExecution) as a
            /// `message` entry under the current leaf.
            "appendMessage" => handlers::entries::append_message(AppendMessageParams) -> AppendResult,
                Awaited, Session, [InvalidParams, UnknownSession, Compacting, LeafMoved, FileChanged, FileBusy, Io];
            /// Appends a thinking_level_change, label, custom, custom_message or session_info
            /// entry; the daemon fills id, parentId and timestamp.
            "appendEntry" => handlers::entries::append_entry(AppendEntryParams) -> AppendResult,
                Inline, Session, [InvalidParams, UnknownSession, Compacting, LeafMoved, EntryNotFound, FileChanged, FileBusy, Io];
            /// The agent switched model: sets the current model and appends a model_change;
            /// reports whether the context already exceeds the new model's threshold (then the
            /// next checkCompaction compacts).
            "setModel" => handlers::sessions::set_model(SetModelParams) -> SetModelResult,
                Inline, Session, [InvalidParams, UnknownSession, Compacting, FileChanged, FileBusy, Io];
            /// Beyond Pi: reads the lines other writers appended to the session file (an agent
            /// that writes the file itself, e.g. Pi with the compactd extension, calls it after
            /// every turn), then starts a speculative compaction when one is due.
            "syncSession" => handlers::sessions::sync_session(SessionParams) -> SyncSessionResult,
                Inline, Session, [InvalidParams, UnknownSession, FileChanged, FileBusy, Io];
            /// Pi's tree navigation, with an optional branch summary of the abandoned branch
            /// and the session_before_tree hook.
            "navigateTree" => navigate::navigate(NavigateTreeParams) -> NavigateTreeResult,
                Task, Session, [InvalidParams, UnknownSession, Compacting, EntryNotFound, LeafMoved, Auth, SummarizationFailed, FileChanged, FileBusy, Io];
            /// The raw entries from the root to the current leaf (no header).
            "getBranch" => handlers::entries::get_branch(SessionParams) -> Branch,
                Inline, Session, [InvalidParams, UnknownSession];
            /// The agent context (Pi's agent.state.messages), or its convertToLlm projection
            /// with format "llm".
            "getContext" => handlers::entries::get_context(GetContextParams) -> Context,
                Inline, Session, [InvalidParams, UnknownSession];
            /// Estimated context tokens against the current model's window; null without a
            /// model (or a window <= 0).
            "getContextUsage" => handlers::entries::get_context_usage(SessionParams) -> ContextUsage,
                Inline, Session, [InvalidParams, UnknownSession];
            /// Beyond Pi: finds text in every entry of the session (all branches, compacted
            /// entries included), most recent first.
            "searchHistory" => history::search_history(SearchHistoryParams) -> HistoryHits,
                Inline, Session, [InvalidParams, UnknownSession];
            /// Beyond Pi: one entry exactly as stored, by id (any branch), e.g. a compacted
            /// message found by searchHistory.
            "getEntry" => history::get_entry(GetEntryParams) -> SessionEntry,
                Inline, Session, [InvalidParams, UnknownSession, EntryNotFound];
            /// Beyond Pi: pins a text (a Pi custom entry, customType compactd.pin); every
            /// summary compactd writes carries the live pins verbatim in a `## Pinned` section.
            "pin" => pins::pin(PinParams) -> PinResult,
                Inline, Session, [InvalidParams, UnknownSession, Compacting, FileChanged, FileBusy, Io];
            /// Beyond Pi: unpins a live pin of the current branch (appends an unpin custom
            /// entry).
            "unpin" => pins::unpin(UnpinParams) -> UnpinResult,
                Inline, Session, [InvalidParams, UnknownSession, Compacting, EntryNotFound, FileChanged, FileBusy, Io];
            /// Beyond Pi: the live pins of the current branch, oldest first.
            "listPins" => pins::list_pins(SessionParams) -> Pins,
                Inline, Session, [InvalidParams, UnknownSession];
            /// Beyond Pi: makes the path before the branch's latest compaction the active one
            /// by appending a compactd.undo_compaction custom entry under the compaction's
            /// parent (the compaction stays in the tree).
            "undoCompaction" => undo::undo_compaction(SessionParams) -> UndoCompactionResult,
                Inline, Session, [InvalidParams, UnknownSession, NothingToCompact, LeafMoved, Compacting, FileChanged, FileBusy, Io];
            /// Beyond Pi: replaces the latest compaction's summary by appending a corrected
            /// compaction beside it (same parent, firstKeptEntryId and tokensBefore;
            /// details.editedFrom names the original).
            "editSummary" => undo::edit_summary(EditSummaryParams) -> EditSummaryResult,
                Inline, Session, [InvalidParams, UnknownSession, NothingToCompact, LeafMoved, Compacting, FileChanged, FileBusy, Io];
            /// Beyond Pi: what the session spent: the agent's replies, its compactions,
            /// discarded speculations and each compaction's cache rewrite, in tokens and (with
            /// prices) US dollars.
            "getCostReport" => spend::get_cost_report(SessionParams) -> CostReport,
                Inline, Session, [InvalidParams, UnknownSession];
            /// Pi's shouldCompact, for a session (agent-context estimate, current model's
            /// window) or for given numbers.
            "shouldCompact" => handlers::compaction::should_compact(ShouldCompactParams) -> ShouldCompactResult,
                Inline, Narrowed, [InvalidParams, UnknownSession, NoModel];
            /// The compaction preparation without calling any model (beyond Pi).
            "previewCompaction" => handlers::compaction::preview_compaction(PreviewCompactionParams) -> PreviewCompactionResult,
                Inline, Session, [InvalidParams, UnknownSession];
            /// Manual compaction (compaction.md §8.2); supersedes a running compaction of the
            /// session.
            "compact" => handlers::compaction::compact(CompactParams) -> CompactionResult,
                Task, Session, [InvalidParams, UnknownSession, NothingToCompact, AlreadyCompacted, Cancelled, SummarizationFailed, Auth, LeafMoved, FileChanged, FileBusy, Io];
            /// Pi's automatic compaction paths (threshold and overflow) at one agent-loop
            /// phase; waits for a running compaction first.
            "checkCompaction" => handlers::compaction::check_compaction(CheckCompactionParams) -> CheckCompactionResult,
                Task, Session, [InvalidParams, UnknownSession];
            /// Signals the running compaction or branch summary and returns at once.
            "abortCompaction" => handlers::compaction::abort_compaction(SessionParams) -> AbortCompactionResult,
                Inline, Session, [InvalidParams, UnknownSession];
            /// The session's effective settings (files re-read when they change).
            "getSettings" => handlers::compaction::get_settings(SessionParams) -> EffectiveSettings,
                Inline, Session, [InvalidParams, UnknownSession];
            /// In-memory compaction overrides for one session, or for every session when
            /// sessionId is omitted; null clears.
            "setSettingsOverrides" => handlers::compaction::set_settings_overrides(SetSettingsOverridesParams) -> SetSettingsOverridesResult,
                Inline, Narrowed, [InvalidParams, UnknownSession];
            /// Adds an event filter for this connection (no sessionId: every session; no
            /// events: all).
            "subscribe" => handlers::registrations::subscribe(SubscribeParams) -> SubscribeResult,
                Inline, Narrowed, [InvalidParams, UnknownSession];
            /// Removes every event filter of this connection.
            "unsubscribe" => handlers::registrations::unsubscribe(NoParams) -> UnsubscribeResult,
                Inline, Global, [];
            /// Registers this connection for hook requests/notifications (x-hooks), for one
            /// session or all.
            "registerHooks" => handlers::registrations::register_hooks(RegisterHooksParams) -> RegisterHooksResult,
                Inline, Narrowed, [InvalidParams, UnknownSession];
        }
    };
}
pub(crate) use for_each_method;

macro_rules! method_specs {
    ($(
        $(#[doc = $doc:literal])+
        $name:literal => $($handler:ident)::+ ($params:ident) -> $result:ident,
            $run:ident, $scope:ident, [$($error:ident),*];
    )*) => {
        /// Every method, in declaration order.
        pub const METHODS: &[MethodSpec] = &[$(
            MethodSpec {
                name: $name,
                summary: concat!($($doc),+),
                run: Run::$run,
                scope: Scope::$scope,
                errors: &[$(ErrorKind::$error),*],
                result_name: stringify!($result),
                params_schema: |s| s.params::<super::types::$params>(),
                result_schema: |s| s.result::<super::results::$result>(),
            }
        ),*];
    };
}

for_each_method!(method_specs);

/// The declaration of `name`, if it is a method.
pub fn spec(name: &str) -> Option<&'static MethodSpec> {
    // Looked up for every message: a hash map built once, not a scan of the list.
    static BY_NAME: std::sync::LazyLock<foldhash::HashMap<&'static str, &'static MethodSpec>> =
        std::sync::LazyLock::new(|| METHODS.iter().map(|m| (m.name, m)).collect());
    BY_NAME.get(name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_summaries_present() {
        let mut names: Vec<&str> = METHODS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a method is declared twice");
        for m in METHODS {
            assert!(!m.summary.trim().is_empty(), "{} has no summary", m.name);
        }
    }

    #[test]
    fn only_long_running_methods_run_in_a_task() {
        let tasks: Vec<&str> = METHODS
            .iter()
            .filter(|m| m.run == Run::Task)
            .map(|m| m.name)
            .collect();
        assert_eq!(tasks, ["navigateTree", "compact", "checkCompaction"]);
        for m in METHODS.iter().filter(|m| m.run == Run::Task) {
            assert_eq!(m.scope, Scope::Session, "{} can be cancelled", m.name);
        }
    }
}
