//! One open session: the tree, its current branch with the running totals of the branch index,
//! the agent context, the current model and thinking level, and the writes Pi's
//! `SessionManager` makes (deferred creation, one appended line per entry).
//!
//! Plain synchronous state behind the session's lock: every method here is quick (O(1) per
//! append, O(kept tail) per check), so the lock is never held across an LLM call (compaction
//! takes handles on what it needs and comes back to append). The branch and its index are
//! rebuilt only when the leaf moves elsewhere than a child of the old leaf.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::compaction::tokens::MessageFacts;
use crate::context::{context_positions, convert_to_llm, project_entry};
use crate::json::stringify;
use crate::live_context::LiveContext;
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::types::Model;
use crate::compaction::BranchIndex;
use crate::session::entry::StopReason;
use crate::session::{ids, BranchView, Entry, EntryKind, Role, SessionTree};
use crate::store;

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
    /// Per-session compaction settings overrides (`setSettingsOverrides`).
    pub overrides: Option<Value>,
}

fn io_error(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(ErrorKind::Io, e.to_string())
}

impl SessionState {
    /// A loaded (persisted) session.
    pub fn loaded(
        path: PathBuf,
        tree: SessionTree,
        model: Option<Model>,
        default_thinking: &str,
        thinking: Option<String>,
    ) -> SessionState {
        let mut s = SessionState {
            path,
            tree,
            branch: Vec::new(),
            index: BranchIndex::default(),
            persisted: true,
            agent: Vec::new(),
            live: LiveContext::default(),
            model,
            thinking_level: String::new(),
            overflow_recovery_attempted: false,
            overrides: None,
        };
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
        SessionState {
            path,
            tree: SessionTree::new(header, Vec::new()),
            branch: Vec::new(),
            index: BranchIndex::default(),
            persisted: false,
            agent: Vec::new(),
            live: LiveContext::default(),
            model,
            thinking_level: thinking,
            overflow_recovery_attempted: false,
            overrides: None,
        }
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
            && !matches!(e.stop_reason, StopReason::Error | StopReason::Length)
        {
            return false;
        }
        self.agent.pop();
        self.live.pop();
        true
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
        let id = self.new_id();
        let parent = self.tree.leaf_id().map(str::to_owned);
        let entry = build(&id, parent.as_deref(), &ids::iso_timestamp(ids::now_ms()));
        let e = Entry::from_value(entry);
        let is_assistant = e.is_message(Role::Assistant);
        if self.persisted {
            store::append_line(&self.path, e.raw()).map_err(io_error)?;
        } else if is_assistant {
            self.create_file(Some(&e))?;
        }
        let idx = self.tree.push(e);
        // The new entry's parent is the old leaf: the branch grows by one.
        self.branch.push(idx);
        let view = BranchView {
            tree: &self.tree,
            positions: &self.branch,
        };
        self.index.push(&view);
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
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error)?;
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.path)
            .map_err(|e| io_error(format!("cannot create {}: {e}", self.path.display())))?;
        f.write_all(&text).map_err(io_error)?;
        f.flush().map_err(io_error)?;
        self.persisted = true;
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
    let mut o = Map::new();
    o.insert("type".into(), Value::from("message"));
    o.insert("id".into(), Value::from(id));
    o.insert("parentId".into(), parent.map_or(Value::Null, Value::from));
    o.insert("timestamp".into(), Value::from(ts));
    o.insert("message".into(), message);
    Value::Object(o)
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
    o.insert("id".into(), Value::from(id));
    o.insert("parentId".into(), parent.map_or(Value::Null, Value::from));
    o.insert("timestamp".into(), Value::from(ts));
    for (k, v) in fields {
        o.insert(k.into(), v);
    }
    Value::Object(o)
}
