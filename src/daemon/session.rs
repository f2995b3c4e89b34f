//! One open session: the tree, its current branch with the running totals of the branch index,
//! the agent context, the current model and thinking level, and the writes Pi's
//! `SessionManager` makes (deferred creation, one appended line per entry).
//!
//! Plain synchronous state behind the session's lock: every method here is quick (O(1) per
//! append, O(kept tail) per check), so the lock is never held across an LLM call (compaction
//! takes handles on what it needs and comes back to append). The branch and its index are
//! rebuilt only when the leaf moves elsewhere than a child of the old leaf.

use serde_json::{Map, Value};

use crate::clearing::{self, CacheDebt, Cleared};
use crate::compaction::projection::{system_tokens, Projection};
use crate::compaction::tokens::MessageFacts;
use crate::compaction::BranchIndex;
use crate::context::{context_positions, project_entry};
use crate::live_context::LiveContext;
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::types::Model;
use crate::session::entry::StopReason;
use crate::session::{ids, BranchView, Entry, EntryId, EntryKind, PiVersion, Role, SessionTree};
use crate::store::{SessionRef, SessionStorage, StoreError};

/// A session's in-memory state.
#[derive(Debug)]
pub struct SessionState {
    /// Where the session's lines live (a file, or a shared database): every read and write of
    /// them goes through it.
    pub storage: Box<dyn SessionStorage>,
    pub tree: SessionTree,
    /// Entry indices of the current branch, root→leaf (Pi's `getBranch()`), kept current.
    pub branch: Vec<usize>,
    /// Running totals along `branch`.
    pub index: BranchIndex,
    /// Whether the file exists on disk (Pi's `flushed`); false for a deferred new session.
    pub persisted: bool,
    /// Entry indices of the agent context's messages (Pi's `agent.state.messages`).
    pub agent: Vec<usize>,
    /// Token facts of `agent`, maintained incrementally (cleared tool results at their
    /// projected size).
    pub live: LiveContext,
    /// Beyond Pi: the clearing passes on the current branch (which tool results the projection
    /// replaces), kept current with `branch`.
    pub cleared: Cleared,
    /// Beyond Pi: what the outputs a clearing pass would clear have cost to re-read since the
    /// last pass (`clearToolResults.cacheAware`); in memory only, so a restart waits longer.
    pub cache_debt: CacheDebt,
    pub model: Option<Model>,
    pub thinking_level: String,
    /// Pi's `_overflowRecoveryAttempted`.
    pub overflow_recovery_attempted: bool,
    /// Beyond Pi: `setModel` switched to a model whose threshold the context exceeds; the next
    /// `checkCompaction` compacts before the next request instead of waiting for an overflow.
    pub model_switch_pending: bool,
    /// Beyond Pi: the thrash breaker of automatic compactions.
    pub thrash: super::thrash::Breaker,
    /// Per-session compaction settings overrides (`setSettingsOverrides`).
    pub overrides: Option<Value>,
    /// How many times another writer's lines moved the leaf off the branch (a fork): a
    /// speculation that no longer applies can then say why.
    pub foreign_moves: u64,
    /// Whose rules the agent context, its estimate and every compaction of this session
    /// follow (the session's `piVersion`, else the daemon's).
    pub rules: PiVersion,
    /// The session's own `piVersion` (`setSettingsOverrides`), which a daemon-wide one does not
    /// change.
    pub own_pi_version: Option<PiVersion>,
    /// Beyond Pi: the handoff check of each compaction entry this daemon wrote for the session,
    /// by entry id (`getCostReport`'s rows); a repaired entry also records its score in
    /// `details.handoff`, which outlives the daemon.
    pub handoffs: std::collections::BTreeMap<String, crate::handoff::Report>,
}

/// What [`SessionState::begin_append`] did.
pub enum Begun {
    /// Written at once: the entry's index.
    Written(usize),
    /// The write travels: await `first`, then [`SessionState::land_append`].
    Travelling(Travelling),
}

/// An append whose first try is on its way to the storage.
pub struct Travelling {
    pub entry: Entry,
    /// The leaf it was built under.
    pub parent: Option<String>,
    pub first: crate::store::FirstTry,
}

/// A session's entries and what is derived from them are freed on the reaper thread
/// (`cpu::discard`): the last holder of a 100 MB session may be an async worker (a
/// `closeSession`, a disconnect). The storage (its file lock) is released here, at once, so the
/// path can be opened again right away.
impl Drop for SessionState {
    fn drop(&mut self) {
        if self.tree.len() < DISCARD_ON_REAPER_ENTRIES {
            // Freed here, once this returns.
            release_if_worth_it(held_bytes(self.tree.len()));
            return;
        }
        let tree = std::mem::replace(&mut self.tree, SessionTree::new(Value::Null, Vec::new()));
        crate::cpu::discard((
            tree,
            std::mem::take(&mut self.branch),
            std::mem::take(&mut self.agent),
            std::mem::take(&mut self.index),
            std::mem::take(&mut self.live),
            std::mem::take(&mut self.cleared),
        ));
    }
}

/// From how many entries a dropped session is freed on the reaper thread; a small one is
/// freed faster than a message to that thread is sent.
const DISCARD_ON_REAPER_ENTRIES: usize = 1024;

impl SessionState {
    /// A session over `tree` with nothing derived yet (no branch, context or index).
    fn new(
        storage: Box<dyn SessionStorage>,
        tree: SessionTree,
        model: Option<Model>,
        thinking_level: String,
        persisted: bool,
        rules: PiVersion,
    ) -> SessionState {
        SessionState {
            storage,
            tree,
            branch: Vec::new(),
            index: BranchIndex::default(),
            persisted,
            agent: Vec::new(),
            live: LiveContext::default(),
            cleared: Cleared::default(),
            cache_debt: CacheDebt::default(),
            model,
            thinking_level,
            overflow_recovery_attempted: false,
            model_switch_pending: false,
            thrash: Default::default(),
            overrides: None,
            foreign_moves: 0,
            rules,
            own_pi_version: None,
            handoffs: Default::default(),
        }
    }

    /// The handoff score of compaction entry `id`: this daemon's check of it, else what a
    /// repaired entry records (`details.handoff.score`).
    pub fn handoff_score(&self, id: &str) -> Option<f64> {
        if let Some(r) = self.handoffs.get(id) {
            return Some(r.score);
        }
        let entry = self.tree.entry(self.tree.index_of(id)?);
        entry
            .get("details")
            .and_then(|d| d.get("handoff"))
            .and_then(|h| h.get("score"))
            .and_then(Value::as_f64)
    }

    /// A loaded (persisted) session.
    pub fn loaded(
        storage: Box<dyn SessionStorage>,
        tree: SessionTree,
        model: Option<Model>,
        default_thinking: &str,
        thinking: Option<String>,
        rules: PiVersion,
    ) -> SessionState {
        let mut s = SessionState::new(storage, tree, model, String::new(), true, rules);
        s.refresh_branch();
        s.thinking_level = thinking.unwrap_or_else(|| {
            s.path_thinking_level()
                .unwrap_or_else(|| default_thinking.to_owned())
        });
        s
    }

    /// A new deferred session under `header` (nothing stored until the first assistant
    /// message).
    pub fn deferred(
        storage: Box<dyn SessionStorage>,
        header: Value,
        model: Option<Model>,
        thinking: String,
        rules: PiVersion,
    ) -> SessionState {
        SessionState::new(
            storage,
            SessionTree::new(header, Vec::new()),
            model,
            thinking,
            false,
            rules,
        )
    }

    /// Why reading this session under Pi 0.85's rules is probably wrong: its branch holds what
    /// only Pi 1.6 writes. `None` under 1.6, or when nothing says so. The message names the
    /// setting that changes it.
    pub fn misread(&self) -> Option<String> {
        if self.rules.is_1_6() {
            return None;
        }
        let sign = crate::session::signs_of_1_6(self.branch.iter().map(|&i| self.tree.entry(i)))?;
        Some(crate::session::misread_message(sign))
    }

    /// Switches the session to `rules` (its `piVersion` changed): the agent context and its
    /// estimate are rebuilt under them. Nothing is written.
    pub fn set_rules(&mut self, rules: PiVersion) {
        if self.rules != rules {
            self.rules = rules;
            self.rebuild_agent_context();
        }
    }

    pub fn view(&self) -> BranchView<'_> {
        BranchView {
            tree: &self.tree,
            positions: &self.branch,
        }
    }

    /// Recomputes the branch, its index and the agent context after the leaf moved (open,
    /// tree navigation). O(path).
    pub fn refresh_branch(&mut self) {
        self.branch = self.tree.branch();
        self.index = BranchIndex::build(&self.view());
        self.rebuild_agent_context();
    }

    /// The last `thinking_level_change` on the current path, if any.
    pub fn path_thinking_level(&self) -> Option<String> {
        self.branch
            .iter()
            .rev()
            .map(|&i| self.tree.entry(i))
            .find(|e| e.kind == EntryKind::ThinkingLevelChange)
            .and_then(|e| e.str_field("thinkingLevel"))
            .map(str::to_owned)
    }

    pub fn cwd(&self) -> Option<&str> {
        self.tree.header.get("cwd").and_then(Value::as_str)
    }

    /// Rebuilds the agent context from the current branch (after open, compaction,
    /// navigation, and under 1.6 an edit or a system message). O(context).
    pub fn rebuild_agent_context(&mut self) {
        if self.rules.is_1_6() {
            return self.rebuild_projected_context();
        }
        let view = self.view();
        self.agent = context_positions(&view)
            .into_iter()
            .map(|p| self.branch[p])
            .filter(|&i| self.tree.entry(i).role.is_some())
            .collect();
        // Kept while the session is open: no room for what the filter dropped.
        self.agent.shrink_to_fit();
        let mut cleared = Cleared::default();
        for &i in &self.branch {
            cleared.record(i, self.tree.entry(i));
        }
        self.cleared = cleared;
        self.live = self.agent.iter().map(|&i| self.message_facts(i)).collect();
    }

    /// Pi 1.6's agent context: the branch's projection (edits applied, the newest compaction's
    /// checkpoint and summary, system messages counted). Usage a reply recorded before the
    /// latest edit or compaction no longer describes the context, so it is dropped here; a
    /// reply appended later brings valid usage again. Without usage, the estimate counts the
    /// replayed system message once instead of each system message.
    fn rebuild_projected_context(&mut self) {
        let view = self.view();
        let proj = Projection::build(&view);
        let invalidated_at = (0..self.branch.len()).rev().find(|&p| {
            matches!(
                self.tree.entry(self.branch[p]).kind,
                EntryKind::ContextEdit | EntryKind::Compaction
            )
        });
        let mut facts = Vec::new();
        let mut agent = Vec::new();
        let mut system_total = 0u64;
        for pe in proj.entries.iter().filter(|pe| pe.part.count() > 0) {
            agent.push(self.branch[pe.pos]);
            let stale = invalidated_at.is_some_and(|at| pe.pos < at);
            for (mut f, system) in pe.part.message_facts() {
                if stale {
                    f.usage_tokens = None;
                }
                if system {
                    system_total += f.tokens;
                }
                facts.push(f);
            }
        }
        let current = system_tokens(proj.current_system_message(&view).as_ref());
        // Pi 1.6 ignores `compactd.clear` entries: its passes are `context_edit`s, applied by
        // the projection itself.
        let cleared = Cleared::replaced(
            proj.edits
                .iter()
                .filter(|e| !e.omit && e.target_in_context)
                .map(|e| EntryId::from(e.target_id.as_str())),
        );
        agent.shrink_to_fit();
        self.agent = agent;
        self.cleared = cleared;
        self.live = facts.into_iter().collect();
        self.live
            .set_no_usage_adjustment(current as i64 - system_total as i64);
    }

    /// The agent context's messages as Pi 1.6 projects them.
    fn projected_messages(&self) -> Vec<Value> {
        let view = self.view();
        Projection::build(&view).messages(&view)
    }

    /// Pi 1.6's replayed system message of the context now (`None` under 0.85, or without
    /// one): what a compaction entry checkpoints.
    pub fn current_system_message(&self) -> Option<Value> {
        if !self.rules.is_1_6() {
            return None;
        }
        let view = self.view();
        Projection::build(&view).current_system_message(&view)
    }

    /// The token facts of the message at tree index `i` as the projection holds it: a cleared
    /// tool result at its placeholder's size, usage reported before the latest clearing pass
    /// dropped.
    fn message_facts(&self, i: usize) -> MessageFacts {
        let e = self.tree.entry(i);
        MessageFacts {
            tokens: clearing::tokens_in_projection(e, &self.cleared),
            usage_tokens: e.usage_tokens().filter(|_| !self.cleared.usage_stale(i)),
        }
    }

    /// The agent context's messages (parsed from the entries now), cleared tool results as
    /// their placeholders.
    pub fn agent_messages(&self) -> Vec<Value> {
        if self.rules.is_1_6() {
            return self.projected_messages();
        }
        self.agent
            .iter()
            .filter_map(|&i| {
                let e = self.tree.entry(i);
                let mut m = project_entry(e)?;
                if self.cleared.covers(e) {
                    if let (Value::Object(o), Some(id)) = (&mut m, e.id.as_deref()) {
                        clearing::project_message(o, id, e.tokens);
                    }
                }
                Some(m)
            })
            .collect()
    }

    /// The context's entries, in context order (what a clearing pass weighs).
    pub fn context_entries(&self) -> Vec<&Entry> {
        self.agent.iter().map(|&i| self.tree.entry(i)).collect()
    }

    pub fn llm_messages(&self) -> Vec<Value> {
        crate::context::convert_to_llm_in(self.rules, &self.agent_messages())
    }

    /// The last assistant message of the agent context (aborted included).
    pub fn last_assistant(&self) -> Option<Value> {
        self.agent.iter().rev().find_map(|&i| {
            let e = self.tree.entry(i);
            e.is_message(Role::Assistant)
                .then(|| e.message().map(Value::Object))
                .flatten()
        })
    }

    /// Whether the usage the last assistant message of the context reported predates a
    /// clearing pass (beyond Pi; always false without one).
    pub fn last_assistant_usage_stale(&self) -> bool {
        !self.cleared.is_empty()
            && self
                .agent
                .iter()
                .rev()
                .find(|&&i| self.tree.entry(i).is_message(Role::Assistant))
                .is_some_and(|&i| self.cleared.usage_stale(i))
    }

    /// Pi 1.6's `_omitRecoveryAttempt`: the failed reply being recovered from, and the tool
    /// results answering its calls, are left out of the context from now on by one omitting
    /// `context_edit` each (persisted, so Pi and every reader of the file agree). Returns
    /// whether anything was omitted.
    pub fn omit_recovery_attempt(&mut self) -> Result<bool, RpcError> {
        let Some(pos) = self
            .agent
            .iter()
            .rposition(|&i| self.tree.entry(i).is_message(Role::Assistant))
        else {
            return Ok(false);
        };
        let assistant = self.tree.entry(self.agent[pos]);
        let calls: std::collections::HashSet<String> = assistant
            .message()
            .and_then(|m| m.get("content").and_then(Value::as_array).cloned())
            .into_iter()
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("toolCall"))
            .filter_map(|b| b.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        let mut targets: Vec<String> = assistant.id_owned().into_iter().collect();
        for &i in &self.agent[pos + 1..] {
            let e = self.tree.entry(i);
            if e.is_message(Role::Assistant) {
                break;
            }
            let answers = e.is_message(Role::ToolResult)
                && e.message()
                    .and_then(|m| {
                        m.get("toolCallId")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .is_some_and(|id| calls.contains(&id));
            if answers {
                targets.extend(e.id_owned());
            }
        }
        self.append_context_edits(targets.iter().map(|t| (t.as_str(), None)))?;
        Ok(!targets.is_empty())
    }

    /// Appends one Pi 1.6 `context_edit` per `(target, replacement)` (`None` omits the target)
    /// and rebuilds the projected context once, also after a failure part-way: each edit
    /// written stands alone and is in force. Returns how many were written.
    pub fn append_context_edits<'a>(
        &mut self,
        edits: impl IntoIterator<Item = (&'a str, Option<Value>)>,
    ) -> Result<usize, RpcError> {
        let mut written = 0;
        let mut outcome = Ok(());
        for (target, replacement) in edits {
            if let Err(e) = self.append_with(|id, parent, ts| {
                context_edit_entry(id, parent, ts, target, replacement)
            }) {
                outcome = Err(e);
                break;
            }
            written += 1;
        }
        if written > 0 {
            self.rebuild_agent_context();
            // Any clearing edit among them: its output is no longer re-read.
            self.cache_debt.paid();
        }
        outcome.map(|()| written)
    }

    /// Removes the last agent-context message if it is an assistant (overflow recovery); the
    /// file keeps it, as Pi's does.
    pub fn drop_trailing_assistant(&mut self, only_error_or_length: bool) -> bool {
        let Some(&last) = self.agent.last() else {
            return false;
        };
        let e = self.tree.entry(last);
        if !e.is_message(Role::Assistant) {
            return false;
        }
        if only_error_or_length
            && !matches!(e.stop_reason, Some(StopReason::Error | StopReason::Length))
        {
            return false;
        }
        self.agent.pop();
        self.live.pop();
        true
    }

    /// The context window of the session's model, when it has a model with one: the one place
    /// it is looked up.
    pub fn context_window(&self) -> Option<i64> {
        self.model
            .as_ref()
            .map(|m| m.context_window)
            .filter(|w| *w > 0)
    }

    /// Pi's threshold (`contextWindow − reserveTokens`), when the session's model has a window.
    pub fn threshold(&self, settings: &crate::compaction::CompactionSettings) -> Option<f64> {
        self.context_window()
            .map(|w| crate::compaction::tokens::threshold(w, settings))
    }

    /// The session's name in its backend.
    pub fn location(&self) -> &SessionRef {
        self.storage.location()
    }

    /// Reads the session anew after its file was replaced or truncated (a client reopened it):
    /// model, thinking level and overrides are kept.
    pub fn reload(&mut self) -> Result<(), StoreError> {
        self.tree = self.storage.reload()?;
        self.refresh_branch();
        tracing::info!(path = %self.location(), "session file was replaced; reloaded");
        Ok(())
    }

    /// `file_changed` when an entry's line could not be read back from the file since it was
    /// opened (truncated behind compactd's back): a request that read entries' bytes calls this
    /// after reading, so what it made of the missing bytes (a `null` entry, a message left out)
    /// is never returned or written.
    pub fn check_lines(&self) -> Result<(), RpcError> {
        self.storage.lines_intact().map_err(store_error)
    }

    /// Brings the tree up to date with the storage before a write (and when a client reopens
    /// the session): complete lines another writer added are indexed, so the next entry's
    /// parent is the session's true last entry. The storage decides what may not be written
    /// (a file replaced behind compactd's back is `file_changed`, a partial line still growing
    /// `file_busy`): nothing is ever written under a parent the session no longer has.
    pub fn sync_with_file(&mut self) -> Result<(), RpcError> {
        let mut lines = Vec::new();
        let caught_up = self.storage.catch_up(&mut lines);
        if !lines.is_empty() {
            self.ingest(&lines);
        }
        caught_up.map_err(store_error)
    }

    /// Adds complete lines another writer appended. Pi's leaf is the last entry of the file, so
    /// the leaf moves to the last one; a line compactd itself wrote (same id, same bytes) is
    /// skipped, so reading a stretch twice is harmless.
    fn ingest(&mut self, lines: &[u8]) {
        let mut incremental = true;
        // Under 1.6 an edit or a system message rebuilds the context: once for the batch.
        let mut rebuild = false;
        let mut added = 0usize;
        for piece in lines.split(|&b| b == b'\n') {
            let Some(Ok(e)) = Entry::from_line(bytes::Bytes::copy_from_slice(piece)) else {
                continue;
            };
            if e.kind == EntryKind::SessionHeader {
                continue;
            }
            if let Some(i) = e.id.as_deref().and_then(|id| self.tree.index_of(id)) {
                // The same bytes: compactd's own line read again. A kept line that can no longer
                // be read is not indexed again either: its source remembers the failure and the
                // session reports its file changed.
                match (self.tree.entry(i).raw(), e.raw()) {
                    (Ok(kept), Ok(read)) if kept != read => {}
                    _ => continue,
                }
            }
            let follows_leaf =
                e.parent_id.as_deref() == self.tree.leaf_id() && e.parent_id.is_some();
            let is_compaction = e.kind == EntryKind::Compaction;
            let idx = self.tree.push(e);
            added += 1;
            if incremental && follows_leaf && !is_compaction {
                self.extend_branch(idx);
                rebuild |= self.extend_agent(idx);
            } else {
                incremental = false;
            }
        }
        if added > 0 {
            tracing::info!(path = %self.location(), entries = added, "indexed entries written by another process");
        }
        if !incremental {
            self.foreign_moves += 1;
            self.refresh_branch();
        } else if rebuild {
            self.rebuild_agent_context();
        }
    }

    /// Adds `idx`, a child of the old leaf, to the end of the branch and its index. O(1).
    fn extend_branch(&mut self, idx: usize) {
        crate::session::room::push(&mut self.branch, idx);
        let view = BranchView {
            tree: &self.tree,
            positions: &self.branch,
        };
        self.index.push(&view);
        if self.rules.is_1_6() {
            // An edit rebuilds the projection when its entry reaches the context
            // (`push_agent`); a `compactd.clear` entry is nothing to Pi 1.6.
            return;
        }
        if let Some(ids) = self.cleared.record(idx, self.tree.entry(idx)) {
            self.apply_pass(&ids);
        }
    }

    /// A clearing pass reached the leaf under 0.85's rules (compactd's, or one another writer
    /// appended): the context's messages it names shrink to their placeholders, and the usage
    /// replies reported so far no longer describes the projection.
    fn apply_pass(&mut self, ids: &[String]) {
        let named: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        for pos in 0..self.agent.len() {
            let e = self.tree.entry(self.agent[pos]);
            if e.id.as_deref().is_some_and(|id| named.contains(id)) && self.cleared.covers(e) {
                let tokens = clearing::tokens_in_projection(e, &self.cleared);
                self.live.set_tokens(pos, tokens);
            }
        }
        self.live.forget_usage();
        // Whoever appended it (this daemon, the Pi extension, another daemon), the outputs it
        // cleared are no longer re-read.
        self.cache_debt.paid();
    }

    /// Checks `expectedLeafId`.
    pub fn check_leaf(&self, expected: Option<&str>) -> Result<(), RpcError> {
        match expected {
            Some(want) if self.tree.leaf_id() != Some(want) => Err(RpcError::new(
                ErrorKind::LeafMoved,
                format!(
                    "leaf moved: expected {want}, current {}",
                    self.tree.leaf_id().unwrap_or("null")
                ),
            )),
            _ => Ok(()),
        }
    }

    fn new_id(&self) -> String {
        ids::new_entry_id(|c| self.tree.uses_id(c))
    }

    /// Writes and records one entry under the current leaf. `build` receives the new id, the
    /// parent id and the ISO timestamp and returns the entry object with Pi's key order.
    ///
    /// The storage first reads what it must (a file catches up with other writers). When its
    /// write finds that another writer extended the head first (a shared store), the new lines
    /// are read in and the entry, unchanged but for its `parentId`, is written under the new
    /// leaf (it follows from what it was built under: the other writer only appended after it).
    pub fn append_with(
        &mut self,
        build: impl FnOnce(&str, Option<&str>, &str) -> Value,
    ) -> Result<usize, RpcError> {
        self.append_as(None, build)
    }

    /// [`SessionState::append_with`] under the id `chosen` (a client's, checked by the caller to
    /// be new) instead of a fresh one.
    pub fn append_as(
        &mut self,
        chosen: Option<&str>,
        build: impl FnOnce(&str, Option<&str>, &str) -> Value,
    ) -> Result<usize, RpcError> {
        let (e, parent) = self.entry_to_append(chosen, build)?;
        self.write_entry(e, parent.as_deref(), false)
    }

    /// The first half of [`SessionState::append_as`] for a caller that can await: where the
    /// storage's write travels (the database), the entry is built and its first try started,
    /// and the caller awaits it with the state let go ([`super::gate`]), then lands it with
    /// [`SessionState::land_append`]. A storage that writes at once writes here
    /// ([`Begun::Written`]).
    pub fn begin_append(
        &mut self,
        chosen: Option<&str>,
        build: impl FnOnce(&str, Option<&str>, &str) -> Value,
    ) -> Result<Begun, RpcError> {
        let (e, parent) = self.entry_to_append(chosen, build)?;
        if self.persisted {
            if let Some(first) = self.storage.first_try(&e).map_err(store_error)? {
                return Ok(Begun::Travelling(Travelling {
                    entry: e,
                    parent,
                    first,
                }));
            }
        }
        self.write_entry(e, parent.as_deref(), false)
            .map(Begun::Written)
    }

    /// The second half: records the entry whose first try `landed` (`Some(head)`), or, when
    /// another writer won it, appends it after that writer's lines as
    /// [`SessionState::append_as`] does.
    pub fn land_append(
        &mut self,
        entry: Entry,
        parent: Option<&str>,
        landed: Result<Option<i64>, StoreError>,
    ) -> Result<usize, RpcError> {
        let Some(head) = landed.map_err(store_error)? else {
            return self.write_entry(entry, parent, true);
        };
        self.storage.first_try_landed(head);
        Ok(self.record(entry))
    }

    /// The entry `build` makes under the current leaf (after the storage read what it must
    /// before a write), with the id of the leaf it was built under.
    fn entry_to_append(
        &mut self,
        chosen: Option<&str>,
        build: impl FnOnce(&str, Option<&str>, &str) -> Value,
    ) -> Result<(Entry, Option<String>), RpcError> {
        let mut lines = Vec::new();
        let read = self.storage.before_write(&mut lines);
        if !lines.is_empty() {
            self.ingest(&lines);
        }
        read.map_err(store_error)?;
        let id = match chosen {
            Some(id) => id.to_owned(),
            None => self.new_id(),
        };
        let parent = self.tree.leaf_id().map(str::to_owned);
        let e = Entry::from_value(build(
            &id,
            parent.as_deref(),
            &ids::iso_timestamp(ids::now_ms()),
        ));
        Ok((e, parent))
    }

    /// Writes `e`, built under `parent`, and records it; `lost`: its first try was already
    /// made, and another writer won it.
    fn write_entry(
        &mut self,
        mut e: Entry,
        parent: Option<&str>,
        lost: bool,
    ) -> Result<usize, RpcError> {
        if self.persisted {
            // The storage is taken out while it writes, so re-parenting after a lost race can
            // read the other writers' lines into this state.
            let location = self.storage.location().clone();
            let mut storage = std::mem::replace(&mut self.storage, Box::new(Writing(location)));
            let mut rebase = |lines: &[u8]| self.rebase(lines, parent, e.value());
            let written = if lost {
                storage.append_after_lost(&e, &mut rebase)
            } else {
                storage.append(&e, &mut rebase)
            };
            self.storage = storage;
            if let Some(rebased) = written.map_err(store_error)? {
                e = rebased;
            }
        } else if e.is_message(Role::Assistant) {
            self.create_file(Some(&e))?;
        }
        Ok(self.record(e))
    }

    /// Records a written entry as the new leaf.
    fn record(&mut self, e: Entry) -> usize {
        let idx = self.tree.push(e);
        // The new entry's parent is the old leaf: the branch grows by one.
        self.extend_branch(idx);
        release_if_worth_it(0);
        idx
    }

    /// The retry of a lost append (the slow path, so the entry is re-read from its line rather
    /// than kept beside it on every append): reads in the other writers' `lines` and re-parents
    /// `entry` onto the new leaf, which must descend from `before`, the one it was built under.
    fn rebase(
        &mut self,
        lines: &[u8],
        before: Option<&str>,
        mut entry: Value,
    ) -> Result<Entry, StoreError> {
        if !lines.is_empty() {
            self.ingest(lines);
        }
        let leaf = self.tree.leaf_id().map(str::to_owned);
        if !self.descends(leaf.as_deref(), before) {
            return Err(StoreError::Moved(format!(
                "leaf moved: another writer moved it from {} to {}",
                before.unwrap_or("null"),
                leaf.as_deref().unwrap_or("null")
            )));
        }
        if let Some(o) = entry.as_object_mut() {
            o.insert("parentId".into(), leaf.map_or(Value::Null, Value::from));
        }
        Ok(Entry::from_value(entry))
    }

    /// Whether entry `id` is `ancestor` or one of its descendants (`None`: the root). The tree's
    /// own walk, which stops on a parent cycle another writer may have written.
    fn descends(&self, id: Option<&str>, ancestor: Option<&str>) -> bool {
        let Some(ancestor) = ancestor.and_then(|a| self.tree.index_of(a)) else {
            return ancestor.is_none();
        };
        let at = id.and_then(|i| self.tree.index_of(i));
        at.is_some() && self.tree.path_to(at).contains(&ancestor)
    }

    /// Pi's deferred first write: header + every entry so far (+ `extra`), exclusive create.
    fn create_file(&mut self, extra: Option<&Entry>) -> Result<(), RpcError> {
        let entries: Vec<&Entry> = self
            .tree
            .entries()
            .iter()
            .map(|e| &**e)
            .chain(extra)
            .collect();
        self.storage
            .create(&self.tree.header, &entries)
            .map_err(store_error)?;
        self.persisted = true;
        Ok(())
    }

    /// Writes a new session at once, header and entries so far (a shared store: its sessions
    /// are addressed by header id from the moment they are created, so other daemons can open
    /// them before the first reply).
    pub fn persist_now(&mut self) -> Result<(), RpcError> {
        if !self.persisted {
            self.create_file(None)?;
        }
        Ok(())
    }

    /// Adds an appended entry's message to the agent context. Under 1.6 an edit or a system
    /// message changes more than the end of the context: it is rebuilt.
    pub fn push_agent(&mut self, idx: usize) {
        if self.extend_agent(idx) {
            self.rebuild_agent_context();
        }
    }

    /// [`SessionState::push_agent`] but for the rebuild: true when the entry changes more than
    /// the end of the context, so the caller rebuilds it (once, after a batch of entries).
    fn extend_agent(&mut self, idx: usize) -> bool {
        let e = self.tree.entry(idx);
        if self.rules.is_1_6() && (e.kind == EntryKind::ContextEdit || e.role == Some(Role::System))
        {
            if clearing::is_clearing_edit(e) {
                // Whoever appended it (this daemon, the Pi extension through Pi, another
                // daemon), the output it cleared is no longer re-read.
                self.cache_debt.paid();
            }
            return true;
        }
        if e.role.is_some() {
            self.live.push(self.message_facts(idx));
            crate::session::room::push(&mut self.agent, idx);
            release_if_worth_it(0);
        }
        false
    }
}

/// How many bytes must have been left free before the reaper is asked to hand memory back: a
/// wake of that thread costs a context switch on a busy core, and its hand-back
/// (`malloc_trim`) returns whole pages only.
const WORTH_RELEASING: usize = 64 * 1024;

thread_local! {
    /// Bytes this thread freed (sessions dropped here, blocks growing vectors left) that the
    /// reaper was not yet asked to hand back.
    static FREED_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts `freed` bytes (and the blocks growing per-entry vectors left free, `session::room`)
/// and, once [`WORTH_RELEASING`] are free, asks the reaper to hand them back when frees pause.
/// A per-entry vector that grew left its old block free in the heap, resident until the
/// allocator hands it back: 11 MB over eight 100 MB sessions after one append each. A closed
/// session's memory is freed into the arena of the thread that dropped it: without the
/// hand-back, a daemon opening and closing small sessions grew by 6 MB over 5,000 of them.
/// Most appends grow nothing and wake nobody.
fn release_if_worth_it(freed: usize) {
    let total = FREED_HERE.with(|n| n.get()) + freed + crate::session::room::take_left_free();
    let worth = total >= WORTH_RELEASING;
    FREED_HERE.with(|n| n.set(if worth { 0 } else { total }));
    if worth {
        crate::cpu::release_soon();
    }
}

/// About what a session of `entries` entries kept in memory (its facts, its slots in the
/// per-entry vectors, its state): the daemon's many-sessions bench measures 5.7 KB for a
/// session of four entries.
fn held_bytes(entries: usize) -> usize {
    4096 + 512 * entries
}

/// Stands in for a session's storage while that storage writes (see
/// [`SessionState::append_with`]): nothing reaches it but the location, for log lines.
#[derive(Debug)]
struct Writing(SessionRef);

impl SessionStorage for Writing {
    fn location(&self) -> &SessionRef {
        &self.0
    }

    fn catch_up(&mut self, _into: &mut Vec<u8>) -> Result<(), StoreError> {
        Err(self.busy())
    }

    fn before_write(&mut self, _into: &mut Vec<u8>) -> Result<(), StoreError> {
        Err(self.busy())
    }

    fn append(
        &mut self,
        _entry: &Entry,
        _rebase: &mut crate::store::Rebase<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        Err(self.busy())
    }

    fn create(&mut self, _header: &Value, _entries: &[&Entry]) -> Result<(), StoreError> {
        Err(self.busy())
    }

    fn reload(&mut self) -> Result<SessionTree, StoreError> {
        Err(self.busy())
    }
}

impl Writing {
    fn busy(&self) -> StoreError {
        StoreError::Unavailable(format!("{} is being written", self.0))
    }
}

/// Builds a `message` entry in Pi's key order.
pub fn message_entry(id: &str, parent: Option<&str>, ts: &str, message: Value) -> Value {
    simple_entry("message", id, parent, ts, vec![("message", message)])
}

/// A Pi 1.6 `context_edit` entry: from here on, `target`'s message is left out of the context
/// (`replacement: None`) or has its content replaced.
pub fn context_edit_entry(
    id: &str,
    parent: Option<&str>,
    ts: &str,
    target: &str,
    replacement: Option<Value>,
) -> Value {
    simple_entry(
        "context_edit",
        id,
        parent,
        ts,
        vec![
            ("targetId", Value::from(target)),
            ("replacement", replacement.unwrap_or(Value::Null)),
        ],
    )
}

/// The `id, parentId, timestamp` every entry carries.
fn put_ids(o: &mut Map<String, Value>, id: &str, parent: Option<&str>, ts: &str) {
    o.insert("id".into(), Value::from(id));
    o.insert("parentId".into(), parent.map_or(Value::Null, Value::from));
    o.insert("timestamp".into(), Value::from(ts));
}

/// Builds a metadata entry `type, id, parentId, timestamp, <fields…>` in Pi's key order.
pub fn simple_entry(
    kind: &str,
    id: &str,
    parent: Option<&str>,
    ts: &str,
    fields: Vec<(&str, Value)>,
) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), Value::from(kind));
    put_ids(&mut o, id, parent, ts);
    o.extend(fields.into_iter().map(|(k, v)| (k.to_owned(), v)));
    Value::Object(o)
}

/// Builds an entry whose own fields come before `id, parentId, timestamp`, Pi's key order for
/// `custom` and `custom_message` entries: `type, <fields…>, id, parentId, timestamp`.
pub fn custom_entry(
    kind: &str,
    id: &str,
    parent: Option<&str>,
    ts: &str,
    fields: Vec<(&str, Value)>,
) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), Value::from(kind));
    o.extend(fields.into_iter().map(|(k, v)| (k.to_owned(), v)));
    put_ids(&mut o, id, parent, ts);
    Value::Object(o)
}

/// A `model_change` entry naming `model`.
pub fn model_change_entry(id: &str, parent: Option<&str>, ts: &str, model: &Model) -> Value {
    simple_entry(
        "model_change",
        id,
        parent,
        ts,
        vec![
            ("provider", Value::from(model.provider.as_str())),
            ("modelId", Value::from(model.id.as_str())),
        ],
    )
}

/// A `label` entry putting `label` on `target`.
pub fn label_entry(id: &str, parent: Option<&str>, ts: &str, target: &str, label: &str) -> Value {
    simple_entry(
        "label",
        id,
        parent,
        ts,
        vec![
            ("targetId", Value::from(target)),
            ("label", Value::from(label)),
        ],
    )
}

/// The protocol error of a storage failure.
pub fn store_error(e: StoreError) -> RpcError {
    match e {
        StoreError::NotFound(p) => RpcError::new(
            ErrorKind::NotFound,
            format!("Session file not found: {}", p.display()),
        ),
        StoreError::NotASession(..) => RpcError::new(ErrorKind::InvalidSessionFile, e.to_string()),
        StoreError::NotRegular { .. } => RpcError::new(ErrorKind::NotRegularFile, e.to_string()),
        StoreError::TooLarge { .. } => RpcError::new(ErrorKind::TooLarge, e.to_string()),
        StoreError::Busy(_) => RpcError::new(ErrorKind::FileBusy, e.to_string()),
        StoreError::Changed(_) | StoreError::LineGone(_) => {
            RpcError::new(ErrorKind::FileChanged, e.to_string())
        }
        StoreError::Conflict(_) => RpcError::new(ErrorKind::LeafMoved, e.to_string()),
        StoreError::Unavailable(_) => RpcError::new(ErrorKind::StorageUnavailable, e.to_string()),
        StoreError::Write(_) => RpcError::new(ErrorKind::Io, e.to_string()),
        StoreError::NoSuchStored(_) => RpcError::new(ErrorKind::NotFound, e.to_string()),
        StoreError::Invalid(m) => RpcError::invalid_params(m),
        StoreError::NotAllowed(m) => RpcError::new(ErrorKind::PathNotAllowed, m),
        StoreError::Locked(..) => RpcError::new(ErrorKind::Locked, e.to_string()),
        StoreError::Moved(m) => RpcError::new(ErrorKind::LeafMoved, m),
        StoreError::NoDescriptors(m) => RpcError::new(ErrorKind::Overloaded, m),
        StoreError::Empty(_) | StoreError::Io { .. } => RpcError::new(ErrorKind::Io, e.to_string()),
    }
}

#[cfg(test)]
impl SessionState {
    /// An empty session over `storage`, not yet written (Pi's deferred file): for tests.
    pub(crate) fn empty_for_tests(storage: Box<dyn SessionStorage>) -> SessionState {
        SessionState::deferred(
            storage,
            crate::session::new_header("/"),
            None,
            "off".into(),
            PiVersion::V1_6,
        )
    }

    /// [`SessionState::empty_for_tests`] whose writes all go to `storage`, as if its file
    /// existed: for the tests of the layers above.
    pub(crate) fn persisted_for_tests(storage: Box<dyn SessionStorage>) -> SessionState {
        let mut s = SessionState::empty_for_tests(storage);
        s.persisted = true;
        s
    }
}

/// Storage for tests that writes nothing.
#[cfg(test)]
pub(crate) mod test_storage {
    use super::*;

    /// Writes nothing: the append path without a file. With `travel`, its first try is a
    /// write that travels (as to a database) until the test lets it land.
    #[derive(Debug)]
    pub(crate) struct NoFile {
        location: SessionRef,
        travel: Option<Travel>,
    }

    /// A first try that tells `left` when it leaves and lands when `land` is answered.
    #[derive(Debug)]
    pub(crate) struct Travel {
        pub left: std::sync::Arc<tokio::sync::Notify>,
        pub land: tokio::sync::oneshot::Receiver<()>,
    }

    impl NoFile {
        pub(crate) fn new() -> NoFile {
            NoFile {
                location: SessionRef::for_tests("s.jsonl"),
                travel: None,
            }
        }

        pub(crate) fn travelling(travel: Travel) -> NoFile {
            NoFile {
                travel: Some(travel),
                ..NoFile::new()
            }
        }
    }

    impl SessionStorage for NoFile {
        fn location(&self) -> &SessionRef {
            &self.location
        }
        fn catch_up(&mut self, _into: &mut Vec<u8>) -> Result<(), StoreError> {
            Ok(())
        }
        fn before_write(&mut self, _into: &mut Vec<u8>) -> Result<(), StoreError> {
            Ok(())
        }
        fn append(
            &mut self,
            _entry: &Entry,
            _rebase: &mut crate::store::Rebase<'_>,
        ) -> Result<Option<Entry>, StoreError> {
            Ok(None)
        }
        fn first_try(
            &mut self,
            _entry: &Entry,
        ) -> Result<Option<crate::store::FirstTry>, StoreError> {
            let Some(travel) = self.travel.take() else {
                return Ok(None);
            };
            travel.left.notify_one();
            Ok(Some(Box::pin(async move {
                travel
                    .land
                    .await
                    .map_err(|_| StoreError::Unavailable("the test let go".into()))?;
                Ok(Some(1))
            })))
        }
        fn create(&mut self, _header: &Value, _entries: &[&Entry]) -> Result<(), StoreError> {
            Ok(())
        }
        fn reload(&mut self) -> Result<SessionTree, StoreError> {
            Err(StoreError::Unavailable("no file".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_storage::NoFile;
    use super::*;
    use serde_json::json;

    /// Closed sessions are freed on the thread that drops them: once enough is free, the reaper
    /// is asked, once, to hand it back (a daemon opening and closing small sessions grew
    /// without it, its freed memory kept in each thread's arena).
    #[test]
    fn dropped_sessions_ask_the_reaper_once_enough_is_free() {
        let session = || SessionState::empty_for_tests(Box::new(NoFile::new()));
        crate::session::room::take_left_free();
        FREED_HERE.with(|n| n.set(0));
        let before = crate::cpu::releases_asked_here();
        let per = held_bytes(0);
        let enough = WORTH_RELEASING.div_ceil(per);
        for _ in 1..enough {
            drop(session());
        }
        assert_eq!(crate::cpu::releases_asked_here(), before, "not yet");
        drop(session());
        assert_eq!(crate::cpu::releases_asked_here(), before + 1, "asked once");
    }

    /// An append that grows nothing wakes nobody (before, every append woke the reaper, a
    /// context switch each on a busy core); one whose per-entry vectors moved to new blocks,
    /// leaving enough free in the heap, asks the reaper once to hand memory back.
    #[test]
    fn only_an_append_that_left_memory_free_asks_the_reaper() {
        let mut s = SessionState::empty_for_tests(Box::new(NoFile::new()));
        let append = |s: &mut SessionState, i: u64| {
            s.append_with(|id, parent, ts| {
                message_entry(
                    id,
                    parent,
                    ts,
                    json!({"role": "user", "content": "hi", "timestamp": i}),
                )
            })
            .expect("the append succeeds")
        };
        crate::session::room::take_left_free();
        FREED_HERE.with(|n| n.set(0));
        let before = crate::cpu::releases_asked_here();
        for i in 0..3u64 {
            append(&mut s, i);
        }
        assert_eq!(crate::cpu::releases_asked_here(), before, "small appends");
        // Enough blocks left free (as a big session's first append leaves): the next append asks.
        let mut big: Vec<u64> = (0..20_000).collect();
        big.shrink_to_fit();
        let moved = big.as_ptr();
        crate::session::room::push(&mut big, 0);
        if big.as_ptr() != moved {
            append(&mut s, 3);
            assert_eq!(crate::cpu::releases_asked_here(), before + 1);
            append(&mut s, 4);
            assert_eq!(crate::cpu::releases_asked_here(), before + 1, "asked once");
        }
        assert!(s.tree.len() >= 3);
    }
}
