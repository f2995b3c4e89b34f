//! One handler per protocol method (protocol.md §3), independent of any transport: each takes
//! the caller's connection and typed params and returns JSON or an [`RpcError`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::connections::{Connection, HookRegistration, Subscription, OPTIONAL_HOOK_MEMBERS};
use super::session::{message_entry, simple_entry, SessionState};
use super::settings::{agent_dir, effective};
use super::{canonical_path, lifecycle, Daemon, Session};
use crate::compaction::prepare::{plan_compaction, Preparation, PreparedMessage};
use crate::compaction::summary::number;
use crate::compaction::tokens::{should_compact, CompactionSettings};
use crate::rpc::errors::{ErrorKind, RpcError, COMPACTING_MESSAGE};
use crate::rpc::types::*;
use crate::session::{ids, PathEntries};
use crate::store::{self, StoreError};

/// The caller of a method.
#[derive(Clone)]
pub struct Ctx {
    pub daemon: Arc<Daemon>,
    pub conn: Arc<Connection>,
}

/// Protocol version of this daemon.
pub const PROTOCOL_VERSION: &str = "1.0";

fn absolute(p: &str, what: &str) -> Result<PathBuf, RpcError> {
    let path = PathBuf::from(p);
    if !path.is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "{what} must be an absolute path: {p}"
        )));
    }
    Ok(path)
}

/// `SessionInfo` of an open session.
pub fn info(session: &Session) -> SessionInfo {
    let state = session.state.lock();
    SessionInfo {
        session_id: session.id.clone(),
        path: session.path.to_string_lossy().into_owned(),
        header_id: state
            .tree
            .header
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        cwd: state.cwd().map(str::to_owned),
        leaf_id: state.tree.leaf_id().map(str::to_owned),
        entry_count: state.tree.len(),
        persisted: state.persisted,
        model: state.model.clone(),
        thinking_level: state.thinking_level.clone(),
        is_compacting: session.is_compacting(),
    }
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::new(ErrorKind::Internal, e.to_string()))
}

pub fn initialize(_ctx: &Ctx, p: InitializeParams) -> Result<Value, RpcError> {
    if let Some(name) = &p.client_name {
        tracing::info!(client = %name, "client initialized");
    }
    Ok(json!({
        "serverName": "compactd",
        "version": env!("CARGO_PKG_VERSION"),
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {
            "framings": ["ndjson", "lsp"],
            "hooks": HOOKS,
            "events": EVENTS,
            "summarizer": _ctx.daemon.config.summarizer.provider,
        }
    }))
}

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

fn default_thinking(cwd: Option<&str>) -> String {
    effective(cwd.map(Path::new), None, None).default_thinking_level
}

/// Refuses a session path outside the configured roots (`[storage] allowed_roots`), before
/// anything is read or created.
fn check_allowed(ctx: &Ctx, path: &Path) -> Result<(), RpcError> {
    let roots = ctx.daemon.config.storage.roots();
    // Resolve the nearest existing ancestor, so links cannot lead outside the roots.
    let mut existing = path;
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    while !existing.exists() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            break;
        };
        rest.push(name);
        existing = parent;
    }
    let mut resolved = std::fs::canonicalize(existing).unwrap_or_else(|_| existing.to_owned());
    for name in rest.iter().rev() {
        resolved.push(name);
    }
    let path = resolved.as_path();
    if roots.iter().any(|r| path.starts_with(r)) {
        return Ok(());
    }
    let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    Err(RpcError::new(
        ErrorKind::PathNotAllowed,
        format!(
            "Session path is outside the allowed roots ({}): {}",
            list.join(", "),
            path.display()
        ),
    ))
}

pub fn open_session(ctx: &Ctx, p: OpenSessionParams) -> Result<Value, RpcError> {
    let path = canonical_path(&absolute(&p.path, "path")?);
    if let Some(cwd) = &p.cwd {
        absolute(cwd, "cwd")?;
    }
    check_allowed(ctx, &path)?;
    let limits = ctx.daemon.config.storage.limits();
    let (session, created) = ctx.daemon.open_or_insert(&path, &ctx.conn, || {
        match store::load_with(&path, true, &limits) {
            Ok((tree, report, stamp)) => {
                if report.skipped_lines > 0 {
                    tracing::warn!(path = %path.display(), skipped = report.skipped_lines, "malformed lines skipped");
                }
                if let Some(b) = &report.backup {
                    tracing::info!(path = %path.display(), backup = %b.display(), "migrated to v3; original kept");
                }
                let dt = default_thinking(tree.header.get("cwd").and_then(Value::as_str));
                let mut state = SessionState::loaded(path.clone(), tree, p.model.clone(), &dt, p.thinking_level.clone());
                state.stamp = Some(stamp);
                state.limits = limits;
                if report.migrated {
                    // The rewrite made a new inode: the lock must be on it.
                    state.lock = store::try_lock(&path).map_err(store_error)?;
                }
                Ok(state)
            }
            Err(StoreError::NotFound(_)) if p.create => {
                let cwd = p.cwd.clone().ok_or_else(|| RpcError::invalid_params("create needs cwd"))?;
                let thinking = p.thinking_level.clone().unwrap_or_else(|| default_thinking(Some(&cwd)));
                let mut state = SessionState::deferred(path.clone(), &cwd, p.model.clone(), thinking.clone());
                state.limits = limits;
                seed_new_session(&mut state, p.model.as_ref(), &thinking)?;
                Ok(state)
            }
            Err(StoreError::Empty(_)) => {
                // Pi initialises an existing 0-byte file with a fresh header.
                let cwd = p.cwd.clone().unwrap_or_else(|| path.parent().map_or("/".into(), |d| d.to_string_lossy().into_owned()));
                let thinking = p.thinking_level.clone().unwrap_or_else(|| default_thinking(Some(&cwd)));
                let mut state = SessionState::deferred(path.clone(), &cwd, p.model.clone(), thinking);
                state.limits = limits;
                // Appended, not renamed over, so the file (and its lock) stays the same inode.
                let header = crate::json::stringify(&state.tree.header);
                let stamp = store::append_raw(&path, header.as_bytes(), limits.durability.syncs_new_file())
                    .map_err(store_error)?;
                state.stamp = Some(stamp);
                state.persisted = true;
                Ok(state)
            }
            Err(e) => Err(store_error(e)),
        }
    })?;
    if !created {
        let mut state = session.state.lock();
        // Reopening an open session: take in what other writers did to the file meanwhile.
        match state.sync_with_file() {
            Err(e) if e.kind == ErrorKind::FileChanged.as_str() && !session.is_compacting() => {
                state.reload().map_err(store_error)?;
            }
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        if let Some(m) = p.model {
            state.model = Some(m);
        }
        if let Some(t) = p.thinking_level {
            state.thinking_level = t;
        }
    }
    to_value(info(&session))
}

/// Pi's new-session entries: a `model_change` (if a model is known) and a `thinking_level_change`.
fn seed_new_session(
    state: &mut SessionState,
    model: Option<&Model>,
    thinking: &str,
) -> Result<(), RpcError> {
    if let Some(m) = model {
        state.append_with(|id, parent, ts| {
            simple_entry(
                "model_change",
                id,
                parent,
                ts,
                vec![("provider", json!(m.provider)), ("modelId", json!(m.id))],
            )
        })?;
    }
    state.append_with(|id, parent, ts| {
        simple_entry(
            "thinking_level_change",
            id,
            parent,
            ts,
            vec![("thinkingLevel", json!(thinking))],
        )
    })?;
    Ok(())
}

/// `--<cwd>--` directory name of Pi's default session dir.
pub fn encoded_cwd(cwd: &str) -> String {
    let trimmed = cwd.strip_prefix(['/', '\\']).unwrap_or(cwd);
    format!("--{}--", trimmed.replace(['/', '\\', ':'], "-"))
}

pub fn create_session(ctx: &Ctx, p: CreateSessionParams) -> Result<Value, RpcError> {
    absolute(&p.cwd, "cwd")?;
    let dir = match &p.session_dir {
        Some(d) => absolute(d, "sessionDir")?,
        None => agent_dir().join("sessions").join(encoded_cwd(&p.cwd)),
    };
    let thinking = p
        .thinking_level
        .clone()
        .unwrap_or_else(|| default_thinking(Some(&p.cwd)));
    let mut state =
        SessionState::deferred(PathBuf::new(), &p.cwd, p.model.clone(), thinking.clone());
    let header_id = state
        .tree
        .header
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let ts = state
        .tree
        .header
        .get("timestamp")
        .and_then(Value::as_str)
        .unwrap_or("")
        .replace([':', '.'], "-");
    let path = canonical_path(&dir.join(format!("{ts}_{header_id}.jsonl")));
    check_allowed(ctx, &path)?;
    state.limits = ctx.daemon.config.storage.limits();
    state.path = path.clone();
    seed_new_session(&mut state, p.model.as_ref(), &thinking)?;
    let (session, _) = ctx.daemon.open_or_insert(&path, &ctx.conn, || Ok(state))?;
    to_value(info(&session))
}

pub fn close_session(ctx: &Ctx, p: SessionParams) -> Result<Value, RpcError> {
    ctx.daemon.session(&p.session_id)?;
    ctx.conn.holds.lock().remove(&p.session_id);
    let closed = ctx.daemon.release(&p.session_id, ctx.conn.id);
    Ok(json!({ "closed": closed }))
}

pub fn list_sessions(ctx: &Ctx) -> Result<Value, RpcError> {
    to_value(
        ctx.daemon
            .sessions()
            .iter()
            .map(|s| info(s))
            .collect::<Vec<_>>(),
    )
}

/// Appends are refused only while a `navigateTree` branch summary runs (the leaf is about to
/// move); during a compaction they are accepted and land in its kept tail (beyond Pi).
pub(super) fn writable(session: &Session) -> Result<(), RpcError> {
    if session.navigating.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(RpcError::new(ErrorKind::Compacting, COMPACTING_MESSAGE));
    }
    Ok(())
}

fn appended(state: &SessionState, idx: usize) -> Result<Value, RpcError> {
    let id = state.tree.entry(idx).id.clone().unwrap_or_default();
    to_value(AppendResult {
        entry_id: id.clone(),
        leaf_id: id,
    })
}

pub fn append_message(ctx: &Ctx, p: AppendMessageParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let Value::Object(mut message) = p.message else {
        return Err(RpcError::invalid_params("message must be an object"));
    };
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !matches!(
        role.as_str(),
        "user" | "assistant" | "toolResult" | "bashExecution"
    ) {
        return Err(RpcError::invalid_params(format!(
            "message.role must be user, assistant, toolResult or bashExecution (got {role:?})"
        )));
    }
    if !message.contains_key("timestamp") {
        message.insert("timestamp".into(), Value::from(ids::now_ms()));
    }
    let stop = message
        .get("stopReason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut state = session.state.lock();
    writable(&session)?;
    state.check_leaf(p.expected_leaf_id.as_deref())?;
    let idx = state
        .append_with(|id, parent, ts| message_entry(id, parent, ts, Value::Object(message)))?;
    state.push_agent(idx);
    // Pi resets the overflow-recovery flag on a new user message and on a successful reply.
    if role == "user"
        || (role == "assistant" && !matches!(stop.as_deref(), Some("error" | "length")))
    {
        state.overflow_recovery_attempted = false;
    }
    appended(&state, idx)
}

fn normalize_name(name: &str) -> String {
    let mut out = String::new();
    let mut in_break = false;
    for c in name.chars() {
        if c == '\r' || c == '\n' {
            if !in_break {
                out.push(' ');
            }
            in_break = true;
        } else {
            out.push(c);
            in_break = false;
        }
    }
    out.trim().to_owned()
}

pub fn append_entry(ctx: &Ctx, p: AppendEntryParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let Value::Object(entry) = p.entry else {
        return Err(RpcError::invalid_params("entry must be an object"));
    };
    let kind = entry
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let field = |k: &str| entry.get(k).cloned();
    let mut state = session.state.lock();
    writable(&session)?;
    state.check_leaf(p.expected_leaf_id.as_deref())?;
    let idx = match kind.as_str() {
        "thinking_level_change" => {
            let level = entry
                .get("thinkingLevel")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("thinking_level_change needs a string thinkingLevel"))?
                .to_owned();
            let idx = state.append_with(|id, parent, ts| {
                simple_entry("thinking_level_change", id, parent, ts, vec![("thinkingLevel", json!(level))])
            })?;
            state.thinking_level = level;
            idx
        }
        "label" => {
            let target = entry
                .get("targetId")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("label needs a string targetId"))?
                .to_owned();
            if !state.tree.contains_id(&target) {
                return Err(RpcError::new(ErrorKind::EntryNotFound, format!("Entry {target} not found")));
            }
            let label = entry.get("label").and_then(Value::as_str).filter(|l| !l.is_empty()).map(str::to_owned);
            state.append_with(|id, parent, ts| {
                let mut fields = vec![("targetId", json!(target))];
                if let Some(l) = label {
                    fields.push(("label", json!(l)));
                }
                simple_entry("label", id, parent, ts, fields)
            })?
        }
        "session_info" => {
            let name = entry.get("name").and_then(Value::as_str).map(normalize_name);
            state.append_with(|id, parent, ts| {
                simple_entry("session_info", id, parent, ts, name.map(|n| vec![("name", json!(n))]).unwrap_or_default())
            })?
        }
        "custom" => {
            let custom_type = field("customType").ok_or_else(|| RpcError::invalid_params("custom needs customType"))?;
            let data = field("data");
            state.append_with(|id, parent, ts| {
                let mut o = Map::new();
                o.insert("type".into(), json!("custom"));
                o.insert("customType".into(), custom_type);
                if let Some(d) = data {
                    o.insert("data".into(), d);
                }
                o.insert("id".into(), json!(id));
                o.insert("parentId".into(), parent.map_or(Value::Null, Value::from));
                o.insert("timestamp".into(), json!(ts));
                Value::Object(o)
            })?
        }
        "custom_message" => {
            let custom_type = field("customType").ok_or_else(|| RpcError::invalid_params("custom_message needs customType"))?;
            let content = field("content").ok_or_else(|| RpcError::invalid_params("custom_message needs content"))?;
            let display = field("display").unwrap_or(Value::Bool(true));
            let details = field("details");
            let idx = state.append_with(|id, parent, ts| {
                let mut o = Map::new();
                o.insert("type".into(), json!("custom_message"));
                o.insert("customType".into(), custom_type);
                o.insert("content".into(), content);
                o.insert("display".into(), display);
                if let Some(d) = details {
                    o.insert("details".into(), d);
                }
                o.insert("id".into(), json!(id));
                o.insert("parentId".into(), parent.map_or(Value::Null, Value::from));
                o.insert("timestamp".into(), json!(ts));
                Value::Object(o)
            })?;
            state.push_agent(idx);
            idx
        }
        "model_change" => return Err(RpcError::invalid_params("use setModel for model_change")),
        other => {
            return Err(RpcError::invalid_params(format!(
                "entry.type must be thinking_level_change, label, custom, custom_message or session_info (got {other:?})"
            )))
        }
    };
    appended(&state, idx)
}

pub fn set_model(ctx: &Ctx, p: SetModelParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let settings = ctx.daemon.session_settings(&session).compaction;
    let mut state = session.state.lock();
    writable(&session)?;
    let m = p.model;
    let idx = state.append_with(|id, parent, ts| {
        simple_entry(
            "model_change",
            id,
            parent,
            ts,
            vec![("provider", json!(m.provider)), ("modelId", json!(m.id))],
        )
    })?;
    let window = m.context_window;
    state.model = Some(m);
    // Beyond Pi: a switch to a model the context already overflows is reported now, and the
    // next `checkCompaction` compacts (Pi would send the request and recover from the error).
    let tokens = state.live.estimate().tokens;
    let should = window > 0 && should_compact(tokens, window, &settings);
    state.model_switch_pending = should;
    let id = state.tree.entry(idx).id.clone().unwrap_or_default();
    to_value(SetModelResult {
        entry_id: id.clone(),
        leaf_id: id,
        should_compact: should,
        tokens,
        threshold: window as f64 - settings.reserve_tokens as f64,
    })
}

pub fn get_branch(ctx: &Ctx, p: SessionParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.state.lock();
    // Every entry is parsed from its bytes: off the async workers.
    Ok(crate::cpu::blocking(|| {
        Value::Array(
            state
                .branch
                .iter()
                .map(|&i| state.tree.entry(i).value())
                .collect(),
        )
    }))
}

pub fn get_context(ctx: &Ctx, p: GetContextParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.state.lock();
    let messages = crate::cpu::blocking(|| match p.format.unwrap_or(ContextFormat::Agent) {
        ContextFormat::Agent => state.agent_messages(),
        ContextFormat::Llm => state.llm_messages(),
    });
    Ok(json!({ "messages": messages, "leafId": state.tree.leaf_id() }))
}

pub fn get_context_usage(ctx: &Ctx, p: SessionParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.state.lock();
    let Some(window) = state
        .model
        .as_ref()
        .map(|m| m.context_window)
        .filter(|w| *w > 0)
    else {
        return Ok(Value::Null);
    };
    // After a compaction, the size is unknown until a valid post-compaction usage exists.
    if !state.index.usage_known() {
        return Ok(json!({"tokens": null, "contextWindow": window, "percent": null}));
    }
    let tokens = state.live.estimate().tokens;
    Ok(
        json!({"tokens": number(tokens), "contextWindow": window, "percent": tokens / window as f64 * 100.0}),
    )
}

fn patch_settings(
    base: CompactionSettings,
    patch: Option<&CompactionSettingsPatch>,
) -> CompactionSettings {
    let Some(p) = patch else { return base };
    CompactionSettings {
        enabled: p.enabled.unwrap_or(base.enabled),
        reserve_tokens: p.reserve_tokens.unwrap_or(base.reserve_tokens),
        keep_recent_tokens: p.keep_recent_tokens.unwrap_or(base.keep_recent_tokens),
    }
}

pub fn should_compact_method(ctx: &Ctx, p: ShouldCompactParams) -> Result<Value, RpcError> {
    let (tokens, window, settings) = match &p.session_id {
        Some(id) => {
            let session = ctx.daemon.session(id)?;
            let s = ctx.daemon.session_settings(&session).compaction;
            let state = session.state.lock();
            let window = state
                .model
                .as_ref()
                .map(|m| m.context_window)
                .ok_or_else(|| {
                    RpcError::new(ErrorKind::NoModel, "No model selected for this session")
                })?;
            (
                state.live.estimate().tokens,
                p.context_window.unwrap_or(window),
                patch_settings(s, p.settings.as_ref()),
            )
        }
        None => {
            let tokens = p.context_tokens.ok_or_else(|| {
                RpcError::invalid_params("contextTokens is required without sessionId")
            })?;
            let window = p.context_window.ok_or_else(|| {
                RpcError::invalid_params("contextWindow is required without sessionId")
            })?;
            (
                tokens,
                window,
                patch_settings(CompactionSettings::default(), p.settings.as_ref()),
            )
        }
    };
    Ok(json!({
        "shouldCompact": should_compact(tokens, window, &settings),
        "contextTokens": number(tokens),
        "contextWindow": window,
        "threshold": number(window as f64 - settings.reserve_tokens as f64),
        "settings": settings.to_json(),
    }))
}

pub fn preview_compaction(ctx: &Ctx, p: PreviewCompactionParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let settings = ctx.daemon.session_settings(&session).compaction;
    let state = session.state.lock();
    let view = state.view();
    let plan = match plan_compaction(&view, &state.index, &settings) {
        Ok(p) => p,
        Err(reason) => return Ok(json!({ "nothingToCompact": reason.message() })),
    };
    let kept_start = plan.boundaries.cut.first_kept_entry_index;
    let (kept_tokens, kept_count) = state.index.range_sums(kept_start..view.path_len());
    let (read_files, modified_files) = plan.file_ops.file_lists();
    let mut out = json!({
        "firstKeptEntryId": plan.first_kept_entry_id,
        "isSplitTurn": plan.is_split_turn,
        "tokensBefore": number(plan.tokens_before),
        "hasPreviousSummary": plan.previous_summary.is_some(),
        "summarize": {"count": plan.history.count, "estimatedTokens": plan.history.tokens},
        "turnPrefix": {"count": plan.turn_prefix.count, "estimatedTokens": plan.turn_prefix.tokens},
        "kept": {"count": kept_count, "estimatedTokens": kept_tokens},
        "fileLists": {"readFiles": read_files, "modifiedFiles": modified_files},
        "settings": settings.to_json(),
    });
    if p.detail == Some(PreviewDetail::Full) {
        let prep = Preparation::from_plan(plan, &view, |i| state.tree.shared(state.branch[i]));
        let ids = |m: &[PreparedMessage]| {
            Value::Array(
                m.iter()
                    .map(|x| json!({"entryId": x.entry_id(), "role": x.role_value()}))
                    .collect(),
            )
        };
        let (history, prefix) = crate::report::serialized_inputs(&prep);
        if let Some(o) = out.as_object_mut() {
            o.insert("previousSummary".into(), json!(prep.previous_summary));
            o.insert(
                "messagesToSummarize".into(),
                ids(&prep.messages_to_summarize),
            );
            o.insert("turnPrefixMessages".into(), ids(&prep.turn_prefix_messages));
            o.insert(
                "serialized".into(),
                json!({"messagesToSummarize": history, "turnPrefixMessages": prefix}),
            );
        }
    }
    Ok(out)
}

pub async fn compact(ctx: &Ctx, p: CompactParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let write = p.write != Some(false);
    lifecycle::compact(&ctx.daemon, &session, p.custom_instructions, write).await
}

pub async fn check_compaction(ctx: &Ctx, p: CheckCompactionParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    Ok(lifecycle::check(&ctx.daemon, &session, p.phase)
        .await
        .to_json())
}

pub fn abort_compaction(ctx: &Ctx, p: SessionParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    Ok(json!({ "aborted": lifecycle::abort(&session) }))
}

pub fn get_settings(ctx: &Ctx, p: SessionParams) -> Result<Value, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    Ok(ctx.daemon.session_settings(&session).to_json())
}

pub fn set_settings_overrides(ctx: &Ctx, p: SetSettingsOverridesParams) -> Result<Value, RpcError> {
    let value = match p.compaction {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => {
            serde_json::from_value::<CompactionSettingsPatch>(v.clone())
                .map_err(|e| RpcError::invalid_params(format!("compaction: {e}")))?;
            Some(v)
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                "compaction must be an object or null",
            ))
        }
    };
    match &p.session_id {
        Some(id) => {
            let session = ctx.daemon.session(id)?;
            session.state.lock().overrides = value;
        }
        None => *ctx.daemon.global_overrides.lock() = value,
    }
    Ok(json!({ "ok": true }))
}

/// Event names a connection can subscribe to: exactly what `initialize` advertises
/// (`subscription_dropped` is delivered whatever the filters say, but may be named too).
pub const EVENTS: [&str; 9] = [
    "compaction_start",
    "compaction_suppressed",
    "compaction_undone",
    "summary_edited",
    "compaction_end",
    "summarization_retry_scheduled",
    "summarization_retry_attempt_start",
    "summarization_retry_finished",
    "subscription_dropped",
];

/// Checks names against a known list and an optional session id against the registry (shared
/// by `subscribe` and `registerHooks`).
fn check_registration<'a>(
    ctx: &Ctx,
    what: &str,
    names: impl IntoIterator<Item = &'a String>,
    known: &[&str],
    session_id: Option<&String>,
) -> Result<(), RpcError> {
    if let Some(bad) = names.into_iter().find(|n| !known.contains(&n.as_str())) {
        return Err(RpcError::invalid_params(format!(
            "unknown {what} {bad:?} (known: {})",
            known.join(", ")
        )));
    }
    if let Some(id) = session_id {
        ctx.daemon.session(id)?;
    }
    Ok(())
}

pub fn subscribe(ctx: &Ctx, p: SubscribeParams) -> Result<Value, RpcError> {
    check_registration(
        ctx,
        "event",
        p.events.iter().flatten(),
        &EVENTS,
        p.session_id.as_ref(),
    )?;
    ctx.conn.subscriptions.lock().push(Subscription {
        session_id: p.session_id,
        events: p.events,
    });
    Ok(json!({ "subscribed": true }))
}

pub fn unsubscribe(ctx: &Ctx) -> Result<Value, RpcError> {
    ctx.conn.subscriptions.lock().clear();
    Ok(json!({ "unsubscribed": true }))
}

pub const HOOKS: [&str; 4] = [
    "session_before_compact",
    "session_compact",
    "session_compact_failed",
    "session_before_tree",
];

pub fn register_hooks(ctx: &Ctx, p: RegisterHooksParams) -> Result<Value, RpcError> {
    check_registration(ctx, "hook", p.hooks.iter(), &HOOKS, p.session_id.as_ref())?;
    if let Some(bad) = p
        .include
        .iter()
        .flatten()
        .find(|m| !OPTIONAL_HOOK_MEMBERS.contains(&m.as_str()))
    {
        return Err(RpcError::invalid_params(format!(
            "unknown include member {bad:?} (known: {})",
            OPTIONAL_HOOK_MEMBERS.join(", ")
        )));
    }
    ctx.conn.hooks.lock().push(HookRegistration {
        include: p.include,
        session_id: p.session_id,
        hooks: p.hooks,
        timeout: Duration::from_millis(p.timeout_ms.unwrap_or(60_000)),
        seq: ctx.daemon.next_hook_seq(),
    });
    Ok(json!({ "registered": true }))
}

pub async fn navigate_tree(ctx: &Ctx, p: NavigateTreeParams) -> Result<Value, RpcError> {
    super::navigate::navigate(ctx, p).await
}
