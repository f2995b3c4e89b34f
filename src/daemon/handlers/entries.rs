//! Handlers that append to a session's branch or read it back: messages, metadata entries, the
//! branch, the agent context and its estimated size.

use serde_json::{json, Value};

use super::super::lifecycle::speculation;
use super::super::session::{custom_entry, message_entry, simple_entry, SessionState};
use super::Ctx;
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::results::*;
use crate::rpc::types::*;
use crate::session::ids;

fn appended(state: &SessionState, idx: usize) -> AppendResult {
    let id = state.tree.id_at(idx);
    AppendResult {
        entry_id: id.clone(),
        leaf_id: id,
    }
}

/// The longest client-chosen entry id.
const MAX_ENTRY_ID: usize = 64;

/// Beyond Pi, idempotent appends: with a client-chosen `entryId`, the session is first brought
/// up to date with its storage (so an entry a previous try wrote, on this daemon or another, is
/// seen even when that try's answer was lost), then an id already there answers with that entry
/// when `same` says it is the one asked for, and is refused otherwise. `None`: append it.
fn already_appended(
    state: &mut SessionState,
    entry_id: Option<&str>,
    same: impl Fn(&crate::session::Entry) -> bool,
) -> Result<Option<AppendResult>, RpcError> {
    let Some(id) = entry_id else {
        return Ok(None);
    };
    let valid = !id.is_empty()
        && id.len() <= MAX_ENTRY_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(RpcError::invalid_params(format!(
            "entryId must be 1 to {MAX_ENTRY_ID} letters, digits, '-' or '_' (got {:?})",
            crate::rpc::for_log(&id.chars().take(MAX_ENTRY_ID + 1).collect::<String>())
        )));
    }
    state.sync_with_file()?;
    if state.tree.header_id() == Some(id) {
        return Err(RpcError::invalid_params(format!(
            "entryId {id} is the id of this session's header; choose another"
        )));
    }
    let Some(idx) = state.tree.index_of(id) else {
        return Ok(None);
    };
    if !same(state.tree.entry(idx)) {
        return Err(RpcError::invalid_params(format!(
            "entryId {id} is already the id of a different entry in this session"
        )));
    }
    Ok(Some(appended(state, idx)))
}

/// Awaited ([`crate::rpc::methods::Run::Awaited`]): the append waits for its turn at the
/// session's gate and, where its write travels (the database), awaits the write holding the
/// turn but not the state ([`crate::daemon::gate`]): a session's appends stay serialized, no
/// thread waits on the server, and readers of the session are not held up by it.
pub async fn append_message(ctx: &Ctx, p: AppendMessageParams) -> Result<AppendResult, RpcError> {
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
    let stamped = message.contains_key("timestamp");
    if !stamped {
        message.insert("timestamp".into(), Value::from(ids::now_ms()));
    }
    let stop = message
        .get("stopReason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut state = session.lock_state_async().await;
    session.writable()?;
    // A retry is the same message: every field as sent (the timestamp the daemon filled in
    // aside, which differs between tries).
    let same = |e: &crate::session::Entry| {
        e.message().is_some_and(|mut written| {
            if !stamped {
                written.remove("timestamp");
            }
            let filled = usize::from(!stamped);
            written.len() + filled == message.len()
                && written.iter().all(|(k, v)| message.get(k) == Some(v))
        })
    };
    if let Some(done) = already_appended(&mut state, p.entry_id.as_deref(), same)? {
        return Ok(done);
    }
    state.check_leaf(p.expected_leaf_id.as_deref())?;
    let (mut state, appended_at) = state
        .append_awaiting(p.entry_id.as_deref(), |id, parent, ts| {
            message_entry(id, parent, ts, Value::Object(message))
        })
        .await;
    let idx = appended_at?;
    if role == "assistant" {
        // Beyond Pi: what the reply reports against the context it was sent (the context
        // before it joins).
        if let Some(reply) = state.tree.entry(idx).message() {
            ctx.daemon.observe_reply(&state, &reply);
        }
    }
    state.push_agent(idx);
    // Pi resets the overflow-recovery flag on a new user message and on a successful reply.
    if role == "user"
        || (role == "assistant" && !matches!(stop.as_deref(), Some("error" | "length")))
    {
        state.overflow_recovery_attempted = false;
    }
    let result = appended(&state, idx);
    drop(state);
    if role == "assistant" {
        // Beyond Pi: a reply may bring the context to where a speculation starts.
        let settings = ctx.daemon.session_settings(&session);
        speculation::consider(&ctx.daemon, &session, &settings);
    }
    Ok(result)
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

pub fn append_entry(ctx: &Ctx, p: AppendEntryParams) -> Result<AppendResult, RpcError> {
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
    let mut state = session.lock_state();
    session.writable()?;
    let same = |e: &crate::session::Entry| e.kind.type_name() == kind;
    if let Some(done) = already_appended(&mut state, p.entry_id.as_deref(), same)? {
        return Ok(done);
    }
    state.check_leaf(p.expected_leaf_id.as_deref())?;
    let chosen = p.entry_id.as_deref();
    let idx = match kind.as_str() {
        "thinking_level_change" => {
            let level = entry
                .get("thinkingLevel")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("thinking_level_change needs a string thinkingLevel"))?
                .to_owned();
            let idx = state.append_as(chosen, |id, parent, ts| {
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
            state.append_as(chosen, |id, parent, ts| {
                let mut fields = vec![("targetId", json!(target))];
                if let Some(l) = label {
                    fields.push(("label", json!(l)));
                }
                simple_entry("label", id, parent, ts, fields)
            })?
        }
        "session_info" => {
            let name = entry.get("name").and_then(Value::as_str).map(normalize_name);
            state.append_as(chosen, |id, parent, ts| {
                simple_entry("session_info", id, parent, ts, name.map(|n| vec![("name", json!(n))]).unwrap_or_default())
            })?
        }
        "custom" => {
            let custom_type = field("customType").ok_or_else(|| RpcError::invalid_params("custom needs customType"))?;
            let data = field("data");
            let mut fields = vec![("customType", custom_type)];
            fields.extend(data.map(|d| ("data", d)));
            state.append_as(chosen, |id, parent, ts| custom_entry("custom", id, parent, ts, fields))?
        }
        "custom_message" => {
            let custom_type = field("customType").ok_or_else(|| RpcError::invalid_params("custom_message needs customType"))?;
            let content = field("content").ok_or_else(|| RpcError::invalid_params("custom_message needs content"))?;
            let display = field("display").unwrap_or(Value::Bool(true));
            let details = field("details");
            let mut fields = vec![("customType", custom_type), ("content", content), ("display", display)];
            fields.extend(details.map(|d| ("details", d)));
            let idx = state.append_as(chosen, |id, parent, ts| custom_entry("custom_message", id, parent, ts, fields))?;
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
    Ok(appended(&state, idx))
}

pub fn get_branch(ctx: &Ctx, p: SessionParams) -> Result<Branch, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.read_state();
    // Every entry is parsed from its bytes: off the async workers.
    let branch = crate::cpu::blocking(|| {
        state
            .branch
            .iter()
            .map(|&i| SessionEntry(state.tree.entry(i).value()))
            .collect()
    });
    state.check_lines()?;
    Ok(branch)
}

pub fn get_context(ctx: &Ctx, p: GetContextParams) -> Result<Context, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.read_state();
    let messages = crate::cpu::blocking(|| match p.format.unwrap_or(ContextFormat::Agent) {
        ContextFormat::Agent => state.agent_messages(),
        ContextFormat::Llm => state.llm_messages(),
    });
    state.check_lines()?;
    Ok(Context {
        messages: messages.into_iter().map(AgentMessage).collect(),
        leaf_id: state.tree.leaf_id().map(str::to_owned),
    })
}

pub fn get_context_usage(ctx: &Ctx, p: SessionParams) -> Result<ContextUsage, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let settings = ctx.daemon.session_settings(&session);
    let state = session.read_state();
    // Beyond Pi: what compactd learned of this model's tokenizer (used with
    // `calibratedEstimates`), once a reply taught it anything.
    let learned = ctx.daemon.calibration(state.model.as_ref());
    let calibration = (learned.samples > 0).then_some(CalibrationView {
        ratio: learned.ratio,
        samples: learned.samples,
        applied: settings.calibrated_estimates
            && learned.samples >= crate::accounting::calibration::MIN_SAMPLES,
    });
    let Some(window) = state.context_window() else {
        return Ok(None);
    };
    // After a compaction, the size is unknown until a valid post-compaction usage exists.
    if !state.index.usage_known() {
        return Ok(Some(UsageFigures {
            tokens: None,
            context_window: window,
            percent: None,
            calibration,
        }));
    }
    let tokens = ctx.daemon.estimate(&state, &settings).tokens;
    Ok(Some(UsageFigures {
        tokens: Some(tokens),
        context_window: window,
        percent: Some(tokens / window as f64 * 100.0),
        calibration,
    }))
}
