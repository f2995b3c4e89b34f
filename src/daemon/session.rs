//! One open session: the tree, its current branch with the running totals of the branch index,
//! the agent context, the current model and thinking level, and the writes Pi's
//! `SessionManager` makes (deferred creation, one appended line per entry).
//!
//! Plain synchronous state behind the session's lock: every method here is quick (O(1) per
//! append, O(kept tail) per check), so the lock is never held across an LLM call (compaction
//! takes handles on what it needs and comes back to append). The branch and its index are
//! rebuilt only when the leaf moves elsewhere than a child of the old leaf.

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::compaction::tokens::MessageFacts;
use crate::compaction::BranchIndex;
use crate::context::{context_positions, convert_to_llm, project_entry};
use crate::json::stringify;
use crate::live_context::LiveContext;
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::types::Model;
use crate::session::entry::StopReason;
use crate::session::{ids, BranchView, Entry, EntryKind, Role, SessionTree};
use crate::store::{self, StoreError};

/// A session's in-memory state.
#[derive(Debug)]
pub struct SessionState {
    pub path: PathBuf,
    pub tree: SessionTree,
    /// Entry indices of the current branch, root→leaf (Pi's `getBranch()`), kept current.
    pub branch: Vec<usize>,
    /// Running totals along `branch`.
    pub index: BranchIndex,
    /// Whether the file exists on disk (Pi's `flushed`); false for a deferred new session.
    pub persisted: bool,
    /// Entry indices of the agent context's messages (Pi's `agent.state.messages`).
    pub agent: Vec<usize>,
    /// Token facts of `agent`, maintained incrementally.
    pub live: LiveContext,
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
    /// What compactd last read or wrote of the file (`None` until it exists).
    pub stamp: Option<store::FileStamp>,
    /// The file was replaced or truncated behind compactd's back: writes are refused until the
    /// session is reopened.
    pub file_changed: bool,
    /// Storage limits and durability for this session's file.
    pub limits: store::Limits,
    /// The advisory lock compactd processes share on the file (proto-docs/storage.md).
    pub lock: Option<std::fs::File>,
    /// How many times another writer's lines moved the leaf off the branch (a fork): a
    /// speculation that no longer applies can then say why.
    pub foreign_moves: u64,
}

fn io_error(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(ErrorKind::Io, e.to_string())
}

impl SessionState {
    /// A session over `tree` with nothing derived yet (no branch, context or index).
    fn new(
        path: PathBuf,
        tree: SessionTree,
        model: Option<Model>,
        thinking_level: String,
        persisted: bool,
    ) -> SessionState {
        SessionState {
            path,
            tree,
            branch: Vec::new(),
            index: BranchIndex::default(),
            persisted,
            agent: Vec::new(),
            live: LiveContext::default(),
            model,
            thinking_level,
            overflow_recovery_attempted: false,
            model_switch_pending: false,
            thrash: Default::default(),
            overrides: None,
            stamp: None,
            file_changed: false,
            limits: store::Limits::default(),
            lock: None,
            foreign_moves: 0,
        }
    }

    /// A loaded (persisted) session.
    pub fn loaded(
        path: PathBuf,
        tree: SessionTree,
        model: Option<Model>,
        default_thinking: &str,
        thinking: Option<String>,
    ) -> SessionState {
        let mut s = SessionState::new(path, tree, model, String::new(), true);
        s.refresh_branch();
        s.thinking_level = thinking.unwrap_or_else(|| {
            s.path_thinking_level()
                .unwrap_or_else(|| default_thinking.to_owned())
        });
        s
    }

    /// A new deferred session (nothing on disk until the first assistant message).
    pub fn deferred(
        path: PathBuf,
        cwd: &str,
        model: Option<Model>,
        thinking: String,
    ) -> SessionState {
        let header = serde_json::json!({
            "type": "session",
            "version": 3,
            "id": ids::new_session_id(),
            "timestamp": ids::iso_timestamp(ids::now_ms()),
            "cwd": cwd,
        });
        SessionState::new(
            path,
            SessionTree::new(header, Vec::new()),
            model,
            thinking,
            false,
        )
    }

    /// The current branch as a path the pure algorithms read.
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
    /// navigation). O(context).
    pub fn rebuild_agent_context(&mut self) {
        let view = self.view();
        self.agent = context_positions(&view)
            .into_iter()
            .map(|p| self.branch[p])
            .filter(|&i| self.tree.entry(i).role.is_some())
            .collect();
        let mut live = LiveContext::default();
        for &i in &self.agent {
            live.push_entry(self.tree.entry(i));
        }
        self.live = live;
    }

    /// The agent context's messages (parsed from the entries now).
    pub fn agent_messages(&self) -> Vec<Value> {
        self.agent
            .iter()
            .filter_map(|&i| project_entry(self.tree.entry(i)))
            .collect()
    }

    pub fn llm_messages(&self) -> Vec<Value> {
        convert_to_llm(&self.agent_messages())
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

    /// Reads the file anew after it was replaced or truncated (a client reopened the session):
    /// model, thinking level and overrides are kept.
    pub fn reload(&mut self) -> Result<(), store::StoreError> {
        let (tree, _report, stamp) = store::load_with(&self.path, true, &self.limits)?;
        self.tree = tree;
        self.stamp = Some(stamp);
        self.file_changed = false;
        self.lock = store::try_lock(&self.path)?;
        self.refresh_branch();
        tracing::info!(path = %self.path.display(), "session file was replaced; reloaded");
        Ok(())
    }

    /// Brings the tree up to date with the file before a write (and when a client reopens the
    /// session): complete lines another writer appended are indexed, so the next entry's parent
    /// is the file's true last entry. A partial last line may still be growing: it is waited for
    /// and repaired (Pi's newline repair) only once it has stayed unchanged for
    /// [`store::TORN_LINE_SETTLE`]; one still growing after a second refuses the write
    /// (`file_busy`). A file replaced or truncated behind compactd's back refuses every write
    /// (`file_changed`) until the session is reopened: nothing is ever written under a parent
    /// the file no longer has.
    pub fn sync_with_file(&mut self) -> Result<(), RpcError> {
        let Some(mut stamp) = self.stamp else {
            return Ok(());
        };
        if self.file_changed {
            return Err(self.changed_error());
        }
        let mut last_partial: Option<usize> = None;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            let tail = crate::cpu::blocking(|| store::read_tail(&self.path, &stamp, &self.limits))
                .map_err(store_error)?;
            let bytes = match tail {
                store::Tail::Unchanged => return Ok(()),
                store::Tail::Replaced | store::Tail::Truncated => {
                    self.file_changed = true;
                    return Err(self.changed_error());
                }
                store::Tail::Grown(b) => b,
            };
            let complete = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
            if complete > 0 {
                self.ingest(&bytes[..complete]);
                stamp.len += complete as u64;
                self.stamp = Some(stamp);
                last_partial = None;
            }
            let partial = bytes.len() - complete;
            if partial == 0 {
                return Ok(());
            }
            if last_partial == Some(partial) {
                // Unchanged for the settle interval: a torn line, repaired as Pi repairs it
                // (it then reads as one malformed line, which is skipped).
                let after = crate::confined::append_line(&self.path, b"", false, Some(&stamp))
                    .map_err(|e| self.append_error(e))?;
                stamp.len += partial as u64 + 1;
                if (after.dev, after.ino, after.len) != (stamp.dev, stamp.ino, stamp.len) {
                    stamp.len = after.len.min(stamp.len);
                }
                self.stamp = Some(stamp);
                tracing::warn!(path = %self.path.display(), bytes = partial, "repaired a torn last line");
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(store_error(store::StoreError::Busy(self.path.clone())));
            }
            last_partial = Some(partial);
            crate::cpu::blocking(|| std::thread::sleep(store::TORN_LINE_SETTLE));
        }
    }

    /// The protocol error of a refused append: the file at the path is no longer the one last
    /// seen (`file_changed`, and later writes are refused until a reopen), or the write failed
    /// and was taken back (`io`, naming the errno, e.g. ENOSPC).
    fn append_error(&mut self, e: crate::confined::AppendError) -> RpcError {
        match e {
            crate::confined::AppendError::Replaced => {
                self.file_changed = true;
                self.changed_error()
            }
            crate::confined::AppendError::Io(e) => io_error(format!(
                "Could not append to {}: {}; nothing was written",
                self.path.display(),
                crate::confined::describe(&e)
            )),
        }
    }

    fn changed_error(&self) -> RpcError {
        RpcError::new(
            ErrorKind::FileChanged,
            format!(
                "Session file was replaced or truncated by another process; reopen the session: {}",
                self.path.display()
            ),
        )
    }

    /// Adds complete lines another writer appended. Pi's leaf is the last entry of the file, so
    /// the leaf moves to the last one; a line compactd itself wrote (same id, same bytes) is
    /// skipped, so reading a stretch twice is harmless.
    fn ingest(&mut self, lines: &[u8]) {
        let mut incremental = true;
        let mut added = 0usize;
        for piece in lines.split(|&b| b == b'\n') {
            let Some(Ok(e)) = Entry::from_line(bytes::Bytes::copy_from_slice(piece)) else {
                continue;
            };
            if e.kind == EntryKind::SessionHeader {
                continue;
            }
            if let Some(i) = e.id.as_deref().and_then(|id| self.tree.index_of(id)) {
                if self.tree.entry(i).raw() == e.raw() {
                    continue;
                }
            }
            let follows_leaf =
                e.parent_id.as_deref() == self.tree.leaf_id() && e.parent_id.is_some();
            let is_compaction = e.kind == EntryKind::Compaction;
            let idx = self.tree.push(e);
            added += 1;
            if incremental && follows_leaf && !is_compaction {
                self.extend_branch(idx);
                self.push_agent(idx);
            } else {
                incremental = false;
            }
        }
        if added > 0 {
            tracing::info!(path = %self.path.display(), entries = added, "indexed entries written by another process");
        }
        if !incremental {
            self.foreign_moves += 1;
            self.refresh_branch();
        }
    }

    /// Adds `idx`, a child of the old leaf, to the end of the branch and its index. O(1).
    fn extend_branch(&mut self, idx: usize) {
        self.branch.push(idx);
        let view = BranchView {
            tree: &self.tree,
            positions: &self.branch,
        };
        self.index.push(&view);
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
        ids::new_entry_id(|c| self.tree.contains_id(c))
    }

    /// Writes and records one entry under the current leaf. `build` receives the new id, the
    /// parent id and the ISO timestamp and returns the entry object with Pi's key order.
    pub fn append_with(
        &mut self,
        build: impl FnOnce(&str, Option<&str>, &str) -> Value,
    ) -> Result<usize, RpcError> {
        self.sync_with_file()?;
        let id = self.new_id();
        let parent = self.tree.leaf_id().map(str::to_owned);
        let entry = build(&id, parent.as_deref(), &ids::iso_timestamp(ids::now_ms()));
        let e = Entry::from_value(entry);
        let is_assistant = e.is_message(Role::Assistant);
        if self.persisted {
            let sync = self.limits.durability.syncs_entry(e.kind);
            let before = self.stamp.map_or(0, |s| s.len);
            // Written through a descriptor checked against the stamp (same device and inode),
            // found without following a link: see `crate::confined`.
            let after =
                crate::confined::append_line(&self.path, e.raw(), sync, self.stamp.as_ref())
                    .map_err(|e| self.append_error(e))?;
            // Another writer's line may have landed next to ours; then the next sync reads from
            // before our line again (our own line is recognised and skipped).
            let expected = before + e.raw().len() as u64 + 1;
            self.stamp = Some(store::FileStamp {
                len: if after.len == expected {
                    after.len
                } else {
                    before
                },
                ..after
            });
        } else if is_assistant {
            self.create_file(Some(&e))?;
        }
        let idx = self.tree.push(e);
        // The new entry's parent is the old leaf: the branch grows by one.
        self.extend_branch(idx);
        Ok(idx)
    }

    /// Pi's deferred first write: header + every entry so far (+ `extra`), exclusive create.
    fn create_file(&mut self, extra: Option<&Entry>) -> Result<(), RpcError> {
        let mut text = stringify(&self.tree.header).into_bytes();
        text.push(b'\n');
        for e in self.tree.entries().iter().map(|e| &**e).chain(extra) {
            text.extend_from_slice(e.raw());
            text.push(b'\n');
        }
        // Directories made and the file created without following a link (the checked path
        // may have been redirected since `createSession`); a file not written whole is removed.
        let sync = self.limits.durability.syncs_new_file();
        let f = crate::confined::create_new(&self.path, &text, sync, 0o666).map_err(|e| {
            io_error(format!(
                "cannot create {}: {}; nothing was written",
                self.path.display(),
                crate::confined::describe(&e)
            ))
        })?;
        self.persisted = true;
        self.stamp = Some(store::FileStamp {
            len: text.len() as u64,
            ..store::FileStamp::of_file(&f).map_err(io_error)?
        });
        self.lock = store::try_lock(&self.path).map_err(io_error)?;
        Ok(())
    }

    /// Adds an appended entry's message to the agent context.
    pub fn push_agent(&mut self, idx: usize) {
        let e = self.tree.entry(idx);
        if e.role.is_some() {
            self.live.push(MessageFacts {
                tokens: e.tokens,
                usage_tokens: e.usage_tokens,
            });
            self.agent.push(idx);
        }
    }
}

/// Builds a `message` entry in Pi's key order.
pub fn message_entry(id: &str, parent: Option<&str>, ts: &str, message: Value) -> Value {
    simple_entry("message", id, parent, ts, vec![("message", message)])
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
        StoreError::NotASession(_) => RpcError::new(ErrorKind::InvalidSessionFile, e.to_string()),
        StoreError::NotRegular { .. } => RpcError::new(ErrorKind::NotRegularFile, e.to_string()),
        StoreError::TooLarge { .. } => RpcError::new(ErrorKind::TooLarge, e.to_string()),
        StoreError::Busy(_) => RpcError::new(ErrorKind::FileBusy, e.to_string()),
        StoreError::Empty(_) | StoreError::Io { .. } => RpcError::new(ErrorKind::Io, e.to_string()),
    }
}
