//! Handlers for the session lifecycle: the handshake, opening, creating, listing and closing
//! sessions, and the model a session uses.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::super::lifecycle::speculation::{self, DiscardReason};
use super::super::session::{model_change_entry, simple_entry, store_error, SessionState};
use super::super::settings::effective;
use super::super::{Daemon, Session};
use super::Ctx;
use crate::compaction::tokens;
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::events;
use crate::rpc::results::*;
use crate::rpc::types::*;
use crate::rpc::PROTOCOL_VERSION;
use crate::session::ids;
use crate::store::{Address, Opened, StoreError};

fn absolute(p: &str, what: &str) -> Result<PathBuf, RpcError> {
    crate::store::absolute_param(p, what).map_err(store_error)
}

/// `SessionInfo` of an open session.
pub fn info(daemon: &Daemon, session: &Session) -> SessionInfo {
    let settings = session
        .speculation
        .is_busy()
        .then(|| daemon.session_settings(session));
    let state = session.read_state();
    SessionInfo {
        session_id: session.id.clone(),
        path: session.location.to_text(),
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
        speculation: settings
            .and_then(|settings| speculation::view(daemon, session, &state, &settings)),
        context_tokens: None,
        threshold: None,
        auto_compaction: None,
        current_compaction: None,
        last_compaction: None,
    }
}

/// `SessionInfo` with the status a monitor shows (beyond Pi, `listSessions` only): context
/// tokens against the threshold, the thrash breaker, the running and the latest compaction.
/// The settings files are read (cached) before the session's lock is taken, and the engine cache
/// is consulted after it is released, so the lock is held only to read the state.
fn status(daemon: &Daemon, session: &Session) -> SessionInfo {
    let settings = daemon.session_settings(session);
    let mut out = info(daemon, session);
    let now = ids::now_ms();
    let activity = session.activity.lock().clone();
    let mut wrote_last = None;
    {
        let state = session.read_state();
        // After a compaction, until a reply reports usage, Pi's estimate still counts the
        // pre-compaction usage of the kept messages: the messages' own estimates say more.
        out.context_tokens = Some(daemon.context_tokens(&state, &settings));
        out.threshold = state.threshold(&settings.compaction);
        out.auto_compaction = Some(if !settings.compaction.enabled {
            AutoCompaction::Off
        } else if state.thrash.paused_under(&settings.merged) {
            AutoCompaction::Paused
        } else if state.thrash.suppresses_next() {
            AutoCompaction::Suppressed
        } else {
            AutoCompaction::On
        });
        out.last_compaction = state.index.latest_compaction().and_then(|latest| {
            let entry = state.tree.entry(*state.branch.get(latest.at)?);
            let entry_id = entry.id.as_deref()?.to_owned();
            let tokens_before = entry.get("tokensBefore").and_then(Value::as_f64)?;
            let details = entry.get("details");
            let edited = details.and_then(|d| d.get("editedFrom")).is_some();
            let run = entry
                .str_field("firstKeptEntryId")
                .and_then(|kept| activity.finished(kept, tokens_before))
                .filter(|_| !edited);
            let summarizer = details
                .and_then(|d| d.get("summarizer"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| {
                    (entry.get("fromHook") == Some(&Value::Bool(true))).then(|| "hook".into())
                });
            if run.is_some() && summarizer.is_none() {
                wrote_last = Some(state.model.clone());
            }
            Some(LastCompaction {
                handoff_score: state.handoff_score(&entry_id),
                entry_id,
                timestamp: entry.get("timestamp").cloned().unwrap_or(Value::Null),
                tokens_before,
                tokens_after: run.map(|r| r.tokens_after),
                summarizer,
                duration_ms: run.and_then(|r| r.duration_ms),
            })
        });
    }
    if let Some(model) = wrote_last {
        // This daemon wrote it with the session's engine (the configuration is fixed for the
        // daemon's life; the engine follows the session's model).
        if let (Ok(engine), Some(last)) =
            (daemon.engine_for(model.as_ref()), &mut out.last_compaction)
        {
            last.summarizer = Some(engine.label());
        }
    }
    out.current_compaction = activity.running().map(|r| CurrentCompaction {
        reason: r.reason.clone(),
        started_at: ids::iso_timestamp(r.started_ms),
        elapsed_ms: (now - r.started_ms).max(0) as u64,
    });
    out
}

pub fn initialize(ctx: &Ctx, p: InitializeParams) -> Result<InitializeResult, RpcError> {
    if let Some(name) = &p.client_name {
        tracing::info!(client = %crate::rpc::for_log(name), "client initialized");
    }
    if let Some(on) = p.log_notifications {
        crate::daemon::log_relay::listen(&ctx.conn, on);
    }
    Ok(InitializeResult {
        server_name: "compactd",
        version: env!("CARGO_PKG_VERSION"),
        protocol_version: PROTOCOL_VERSION,
        capabilities: Capabilities {
            framings: vec!["ndjson", "lsp"],
            hooks: events::names(events::HOOKS),
            events: events::names(events::EVENTS),
            summarizer: ctx.daemon.config.summarizer.provider.as_str().to_owned(),
            pi_versions: crate::session::PiVersion::ALL
                .iter()
                .map(|v| v.as_str())
                .collect(),
            pi_version: ctx.daemon.default_pi_version().as_str(),
        },
        daemon: ctx.daemon.status(),
    })
}

fn default_thinking(cwd: Option<&str>) -> String {
    effective(cwd.map(Path::new), None, None, &Default::default()).default_thinking_level
}

/// The backend's error for a request that names a session it cannot take, as the protocol
/// says it.
fn refused(e: StoreError) -> RpcError {
    store_error(e)
}

pub fn open_session(ctx: &Ctx, p: OpenSessionParams) -> Result<SessionInfo, RpcError> {
    if let Some(cwd) = &p.cwd {
        absolute(cwd, "cwd")?;
    }
    let backend = &ctx.daemon.storage;
    let address = Address {
        path: p.path.as_deref(),
        header_id: p.header_id.as_deref(),
    };
    let location = backend.locate(address).map_err(refused)?;
    let (session, created) = ctx.daemon.open_or_insert(&location, &ctx.conn, || {
        match backend
            .open(&location, p.cwd.as_deref())
            .map_err(store_error)?
        {
            Opened::Loaded { storage, tree } => {
                let dt = default_thinking(tree.header.get("cwd").and_then(Value::as_str));
                Ok(SessionState::loaded(
                    storage,
                    tree,
                    p.model.clone(),
                    &dt,
                    p.thinking_level.clone(),
                    ctx.daemon.default_pi_version(),
                ))
            }
            Opened::Missing { storage } if p.create => {
                let cwd = p
                    .cwd
                    .clone()
                    .ok_or_else(|| RpcError::invalid_params("create needs cwd"))?;
                let thinking = p
                    .thinking_level
                    .clone()
                    .unwrap_or_else(|| default_thinking(Some(&cwd)));
                let header = crate::session::new_header(&cwd);
                let mut state = SessionState::deferred(
                    storage,
                    header,
                    p.model.clone(),
                    thinking.clone(),
                    ctx.daemon.default_pi_version(),
                );
                seed_new_session(&mut state, p.model.as_ref(), &thinking)?;
                Ok(state)
            }
            Opened::Missing { .. } => Err(store_error(StoreError::not_found(&location))),
        }
    })?;
    if created {
        super::compaction::warn_if_misread(&session.id, &session.lock_state());
    } else {
        rejoin(&session, p)?;
    }
    Ok(info(&ctx.daemon, &session))
}

/// Reopening an open session: take in what other writers did meanwhile, and the model and
/// thinking level the client names.
fn rejoin(session: &Session, p: OpenSessionParams) -> Result<(), RpcError> {
    let mut state = session.lock_state();
    match state.sync_with_file() {
        Err(e) if e.kind == ErrorKind::FileChanged && !session.is_compacting() => {
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
    Ok(())
}

/// Pi's new-session entries: a `model_change` (if a model is known) and a `thinking_level_change`.
fn seed_new_session(
    state: &mut SessionState,
    model: Option<&Model>,
    thinking: &str,
) -> Result<(), RpcError> {
    if let Some(m) = model {
        state.append_with(|id, parent, ts| model_change_entry(id, parent, ts, m))?;
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

pub fn create_session(ctx: &Ctx, p: CreateSessionParams) -> Result<SessionInfo, RpcError> {
    absolute(&p.cwd, "cwd")?;
    let thinking = p
        .thinking_level
        .clone()
        .unwrap_or_else(|| default_thinking(Some(&p.cwd)));
    let header = crate::session::new_header(&p.cwd);
    let new = ctx
        .daemon
        .storage
        .create(&header, p.session_dir.as_deref())
        .map_err(refused)?;
    let mut state = SessionState::deferred(
        new.storage,
        header,
        p.model.clone(),
        thinking.clone(),
        ctx.daemon.default_pi_version(),
    );
    seed_new_session(&mut state, p.model.as_ref(), &thinking)?;
    if new.write_now {
        state.persist_now()?;
    }
    let (session, _) = ctx
        .daemon
        .open_or_insert(&new.location, &ctx.conn, || Ok(state))?;
    Ok(info(&ctx.daemon, &session))
}

/// `listStoredSessions` (beyond Pi): the shared store's sessions, newest first.
pub fn list_stored_sessions(
    ctx: &Ctx,
    p: ListStoredSessionsParams,
) -> Result<StoredSessions, RpcError> {
    let sessions = ctx
        .daemon
        .storage
        .list(p.cwd)
        .map_err(refused)?
        .into_iter()
        .map(|s| StoredSessionInfo {
            header_id: s.header_id,
            cwd: s.cwd,
            created: s.created_ms,
            entry_count: s.entries,
        })
        .collect();
    Ok(StoredSessions { sessions })
}

pub fn close_session(ctx: &Ctx, p: SessionParams) -> Result<CloseSessionResult, RpcError> {
    ctx.daemon.session(&p.session_id)?;
    ctx.conn.holds.lock().remove(&p.session_id);
    let closed = ctx.daemon.release(&p.session_id, ctx.conn.id);
    Ok(CloseSessionResult { closed })
}

pub fn list_sessions(ctx: &Ctx, _: NoParams) -> Result<SessionInfoList, RpcError> {
    Ok(ctx
        .daemon
        .sessions()
        .iter()
        .map(|s| status(&ctx.daemon, s))
        .collect())
}

/// `syncSession` (beyond Pi): reads the lines other writers appended to the session file (an
/// agent that writes the file itself, as Pi does), then considers a speculative compaction.
pub fn sync_session(ctx: &Ctx, p: SessionParams) -> Result<SyncSessionResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let settings = ctx.daemon.session_settings(&session);
    session.lock_state().sync_with_file()?;
    speculation::revalidate(&ctx.daemon, &session, &settings, DiscardReason::Forked);
    speculation::consider(&ctx.daemon, &session, &settings);
    let state = session.lock_state();
    Ok(SyncSessionResult {
        leaf_id: state.tree.leaf_id().map(str::to_owned),
        entry_count: state.tree.len(),
        speculation: speculation::view(&ctx.daemon, &session, &state, &settings),
    })
}

pub fn set_model(ctx: &Ctx, p: SetModelParams) -> Result<SetModelResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let all_settings = ctx.daemon.session_settings(&session);
    let result = switch_model(&ctx.daemon, &session, p.model, &all_settings)?;
    speculation::revalidate(
        &ctx.daemon,
        &session,
        &all_settings,
        DiscardReason::ModelChanged,
    );
    Ok(result)
}

fn switch_model(
    daemon: &Daemon,
    session: &Session,
    m: Model,
    all: &super::super::settings::EffectiveSettings,
) -> Result<SetModelResult, RpcError> {
    let settings = &all.compaction;
    let mut state = session.lock_state();
    session.writable()?;
    let idx = state.append_with(|id, parent, ts| model_change_entry(id, parent, ts, &m))?;
    let window = m.context_window;
    state.model = Some(m);
    // Beyond Pi: a switch to a model the context already overflows is reported now, and the
    // next `checkCompaction` compacts (Pi would send the request and recover from the error).
    let tokens = daemon.estimate(&state, all).tokens;
    let should = window > 0 && tokens::should_compact(tokens, window, settings);
    state.model_switch_pending = should;
    let id = state.tree.id_at(idx);
    Ok(SetModelResult {
        entry_id: id.clone(),
        leaf_id: id,
        should_compact: should,
        tokens,
        threshold: crate::compaction::tokens::threshold(window, settings),
    })
}
