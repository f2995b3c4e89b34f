//! The daemon: open sessions shared by all connections, their single writer, events and hooks.
//!
//! `Daemon` owns the registry (one in-memory session per canonical file path, guarded by an
//! advisory `flock` on the session file itself against other compactd processes), the
//! connection table (for events and hooks) and the configuration. The method handlers
//! (`handlers`, and the lanes `history`, `pins`, `undo`, `navigate`) and the compaction
//! lifecycle (`lifecycle`) are written against it. The transport's connection loop uses it
//! too: it registers each connection, delivers hook replies to it, and aborts a session's work
//! when a client cancels a request or disconnects.

pub mod activity;
pub mod auto_check;
pub mod connections;
pub mod gate;
pub mod handlers;
pub mod history;
pub mod lifecycle;
pub mod log_relay;
pub mod navigate;
pub mod pins;
pub mod session;
pub mod settings;
pub mod shared_store;
pub mod speculation_lead;
pub mod spend;
pub mod thrash;
pub mod undo;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::accounting::Calibration;
use crate::compaction::tokens::ContextEstimate;
use crate::compactor::SummaryEngine;
use crate::config::{Config, EngineKey};
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::events::{HookRequest, Message};
use crate::rpc::types::Model;
use crate::store::SessionRef;
use connections::{ConnId, Connection, PeerError};
use session::SessionState;

/// One open session, shared by every connection that holds it.
pub struct Session {
    pub id: String,
    pub location: SessionRef,
    /// The state, behind the gate its writers pass (`gate`).
    pub state: gate::SessionLock,
    /// The running compaction or branch summary, if any (Pi's abort controllers).
    pub running: Mutex<Option<CancellationToken>>,
    /// Held for the whole of a compaction / branch summary: waiting on it waits for the end.
    pub slot: tokio::sync::Mutex<()>,
    /// A `navigateTree` branch summary runs: appends would land on the branch being left, so
    /// they wait for it (a compaction, by contrast, accepts them: see `lifecycle`).
    pub navigating: std::sync::atomic::AtomicBool,
    /// Beyond Pi: the speculative compaction running or ready for this session.
    pub speculation: lifecycle::speculation::Slot,
    /// What its compactions are doing and did, folded from the events it announced (beyond Pi:
    /// `listSessions` reports it).
    pub activity: Mutex<activity::Activity>,
    holders: Mutex<HashSet<ConnId>>,
}

impl Session {
    /// The session's state, for a caller that may write it: its turn at the session's gate,
    /// then the state ([`gate::SessionLock::lock`]).
    pub fn lock_state(&self) -> gate::StateGuard<'_> {
        self.state.lock()
    }

    /// [`Session::lock_state`], awaiting the turn at the gate without holding a thread.
    pub async fn lock_state_async(&self) -> gate::StateGuard<'_> {
        self.state.lock_async().await
    }

    /// The state for a caller that only reads it; it does not wait for an append whose write
    /// is travelling ([`gate::SessionLock::read`]).
    pub fn read_state(&self) -> gate::ReadGuard<'_> {
        self.state.read()
    }

    pub fn is_compacting(&self) -> bool {
        self.running.lock().is_some()
    }

    pub fn is_navigating(&self) -> bool {
        self.navigating.load(Ordering::SeqCst)
    }

    /// Appends are refused only while a `navigateTree` branch summary runs (the leaf is about
    /// to move); during a compaction they are accepted and land in its kept tail (beyond Pi).
    pub fn writable(&self) -> Result<(), RpcError> {
        if self.is_navigating() {
            return Err(RpcError::new(
                ErrorKind::Compacting,
                crate::rpc::errors::COMPACTING_MESSAGE,
            ));
        }
        Ok(())
    }
}

#[derive(Default)]
struct Registry {
    by_location: HashMap<SessionRef, String>,
    by_id: HashMap<String, Arc<Session>>,
}

/// The daemon's shared state.
pub struct Daemon {
    pub config: Config,
    pub http: reqwest::Client,
    /// The summary engines built so far, one per [`EngineKey`]: the configuration is fixed for
    /// the daemon's life, so an engine (its client and connection pool) is built the first time
    /// a key needs it and shared by every later compaction and branch summary. The keys are the
    /// distinct session models the engine follows, a handful in practice.
    engines: Mutex<HashMap<EngineKey, Arc<SummaryEngine>>>,
    /// Per engine, how long its summaries take (a moving estimate), for speculations that
    /// start early enough (`speculation_lead`).
    latencies: Mutex<HashMap<EngineKey, speculation_lead::Latency>>,
    registry: Mutex<Registry>,
    /// Per-session opening locks: one open of a session at a time, outside the registry lock.
    opening: Mutex<HashMap<SessionRef, Arc<Mutex<()>>>>,
    connections: Mutex<HashMap<ConnId, Arc<Connection>>>,
    next_conn: AtomicU64,
    next_session: AtomicU64,
    hook_seq: AtomicU64,
    /// `setSettingsOverrides` without a session: applies to every session.
    pub global_overrides: Mutex<Option<Value>>,
    /// `setSettingsOverrides {piVersion}` without a session: the rules of every session that
    /// has no `piVersion` of its own (over `[compat] pi_version`).
    pub global_pi_version: Mutex<Option<crate::session::PiVersion>>,
    /// Beyond Pi: per model (`provider/id`), the learned ratio of the tokens providers report
    /// to compactd's chars/4 estimate of the same messages (`accounting::calibration`).
    calibrations: Mutex<HashMap<String, Calibration>>,
    /// Cancelled when the daemon shuts down (SIGTERM/SIGINT): every compaction's abort token
    /// is a child of it, so shutdown aborts them all and any started afterwards.
    pub shutdown: CancellationToken,
    /// Where sessions live (`[storage] backend`), chosen once at start-up: every open, create,
    /// list, lease and cross-daemon event goes through it.
    pub storage: Arc<dyn crate::store::Backend>,
    /// Why the configured backend could not be set up (every session method then reports it).
    pub storage_error: Option<String>,
    /// When the daemon started (`initialize`'s `daemon.uptimeMs`).
    started: std::time::Instant,
    /// What the process serves with, as `compactd status` shows it (set once by `serve`).
    process: std::sync::OnceLock<ProcessInfo>,
}

/// The process around a daemon: what `compactd status` shows of it.
#[derive(Debug, Clone, Default)]
pub struct ProcessInfo {
    /// The socket it listens on (`None`: one the service manager passed, or stdio).
    pub socket: Option<PathBuf>,
    /// The configuration file given on its command line.
    pub config_file: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    /// It exits after this long with no client and no session (started on demand).
    pub idle_exit_seconds: Option<u64>,
}

impl Daemon {
    pub fn new(config: Config) -> Arc<Daemon> {
        let (storage, storage_error) = match config.storage.backend() {
            Ok(b) => (b, None),
            Err(e) => (
                Arc::new(crate::store::Unusable(e.clone())) as Arc<dyn crate::store::Backend>,
                Some(e),
            ),
        };
        let daemon = Arc::new(Daemon {
            config,
            http: reqwest::Client::new(),
            engines: Mutex::new(HashMap::new()),
            latencies: Mutex::new(HashMap::new()),
            registry: Mutex::new(Registry::default()),
            opening: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            hook_seq: AtomicU64::new(1),
            global_overrides: Mutex::new(None),
            global_pi_version: Mutex::new(None),
            calibrations: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            storage,
            storage_error,
            started: std::time::Instant::now(),
            process: std::sync::OnceLock::new(),
        });
        shared_store::start_events(&daemon);
        daemon
    }

    /// The summarizer for a session (`Config::engine_for`): the configured summarizer, else the
    /// session's model through a configured provider, else extractive. A missing key is an
    /// `auth` error.
    /// Pi's `settings.retry` in the session's `settings` governs its calls.
    pub fn session_engine(
        &self,
        session: &Session,
        settings: &settings::EffectiveSettings,
    ) -> Result<Arc<SummaryEngine>, RpcError> {
        let model = session.read_state().model.clone();
        let engine = self.engine_for(model.as_ref())?;
        Ok(engine.with_retry(&settings.retry))
    }

    /// Whose rules a session follows unless it says otherwise: the daemon-wide `piVersion`
    /// override, else `[compat] pi_version`, else Pi 1.6.
    pub fn default_pi_version(&self) -> crate::session::PiVersion {
        self.global_pi_version
            .lock()
            .unwrap_or(self.config.compat.pi_version.0)
    }

    /// How logs and progress lines name the summarizer of the open session `session_id`
    /// (`provider/model` or `extractive`); `None` for an unknown session or a missing key.
    pub fn engine_label(&self, session_id: &str) -> Option<String> {
        let session = self.session(session_id).ok()?;
        let model = session.read_state().model.clone();
        self.engine_for(model.as_ref()).ok().map(|e| e.label())
    }

    /// The engine for sessions on `model`, built once per key and cached. A failure (a missing
    /// key) is not cached: it is reported again, with the same message, each time it is needed.
    pub fn engine_for(&self, model: Option<&Model>) -> Result<Arc<SummaryEngine>, RpcError> {
        let key = self.config.engine_key(model);
        let mut engines = self.engines.lock();
        if let Some(engine) = engines.get(&key) {
            return Ok(engine.clone());
        }
        let engine = self
            .config
            .engine_for(&key, self.http.clone())
            .map_err(|e| RpcError::new(ErrorKind::Auth, e.to_string()))?;
        let engine = Arc::new(engine);
        engines.insert(key, engine.clone());
        Ok(engine)
    }

    /// How long `key`'s engine takes to write a summary, once one was measured.
    pub fn summary_latency(&self, key: &EngineKey) -> Option<std::time::Duration> {
        self.latencies.lock().get(key).and_then(|l| l.estimate())
    }

    /// A summary of `key`'s engine took `took`.
    pub fn observe_summary_latency(&self, key: EngineKey, took: std::time::Duration) {
        self.latencies.lock().entry(key).or_default().observe(took);
    }

    /// The calibration learned for `model` so far.
    pub fn calibration(&self, model: Option<&Model>) -> Calibration {
        model
            .and_then(|m| {
                self.calibrations
                    .lock()
                    .get(&format!("{}/{}", m.provider, m.id))
                    .copied()
            })
            .unwrap_or_default()
    }

    /// Learns from an assistant reply about to be appended to `state`'s context: the prompt
    /// tokens it reports against the previous reply's context plus the estimate of what came
    /// after it (only when that previous usage is after the latest compaction).
    pub fn observe_reply(&self, state: &SessionState, reply: &serde_json::Map<String, Value>) {
        let Some(usage) = reply.get("usage").and_then(Value::as_object) else {
            return;
        };
        let before = state.live.estimate();
        if before.last_usage_index.is_none() || !state.index.usage_known() {
            return;
        }
        let field = |k: &str| usage.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let prompt = field("input") + field("cacheRead") + field("cacheWrite");
        let (Some(provider), Some(id)) = (
            reply.get("provider").and_then(Value::as_str),
            reply.get("model").and_then(Value::as_str),
        ) else {
            return;
        };
        self.calibrations
            .lock()
            .entry(format!("{provider}/{id}"))
            .or_default()
            .observe(prompt, before.usage_tokens, before.trailing_tokens);
    }

    /// The session's context estimate as decisions use it: Pi's usage-first estimate, with
    /// `compaction.calibratedEstimates` (beyond Pi) its trailing part scaled by the model's
    /// learned ratio.
    pub fn estimate(
        &self,
        state: &SessionState,
        settings: &settings::EffectiveSettings,
    ) -> ContextEstimate {
        let mut e = state.live.estimate();
        if settings.calibrated_estimates {
            let factor = self.calibration(state.model.as_ref()).factor();
            e.tokens = e.usage_tokens + factor * e.trailing_tokens as f64;
        }
        e
    }

    /// The context's size for decisions Pi does not make (speculation, the idle gate): the
    /// estimate above, or, while no usage was reported since the latest compaction (the last
    /// usage on the branch would count what the compaction removed), the sum of the context's
    /// per-message estimates.
    pub fn context_tokens(
        &self,
        state: &SessionState,
        settings: &settings::EffectiveSettings,
    ) -> f64 {
        if state.index.usage_known() {
            self.estimate(state, settings).tokens
        } else {
            state.live.estimated_total() as f64
        }
    }

    /// Records what the process serves with (the first call wins).
    pub fn describe(&self, info: ProcessInfo) {
        let _ = self.process.set(info);
    }

    /// The process and its load, as `initialize` reports it to `compactd status`.
    pub fn status(&self) -> crate::rpc::results::DaemonStatus {
        let info = self.process.get().cloned().unwrap_or_default();
        let path = |p: Option<PathBuf>| p.map(|p| p.display().to_string());
        crate::rpc::results::DaemonStatus {
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            connections: self.connections.lock().len() as u64,
            sessions: self.registry.lock().by_id.len() as u64,
            socket: path(info.socket),
            config_file: path(info.config_file),
            log_file: path(info.log_file),
            idle_exit_seconds: info.idle_exit_seconds,
        }
    }

    /// A fresh abort token for a compaction or branch summary (cancelled by shutdown too).
    pub fn run_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// Registers a new connection; the receiver feeds its writer task.
    pub fn connect(
        &self,
    ) -> (
        Arc<Connection>,
        tokio::sync::mpsc::UnboundedReceiver<connections::Outbound>,
    ) {
        let id = self.next_conn.fetch_add(1, Ordering::SeqCst);
        let (conn, rx) = Connection::new(id);
        let conn = Arc::new(conn);
        self.connections.lock().insert(id, conn.clone());
        (conn, rx)
    }

    /// Reply and event bytes queued and not yet written, over every connection (the
    /// daemon-wide reply budget, `--max-queued-total-bytes`, is checked against it).
    pub fn queued_reply_bytes(&self) -> usize {
        self.connections
            .lock()
            .values()
            .map(|c| c.queued_bytes())
            .sum()
    }

    /// A connection is gone: release its holds, subscriptions, hooks and pending requests.
    pub fn disconnect(&self, conn: &Connection) {
        conn.close();
        log_relay::forget(conn.id);
        self.connections.lock().remove(&conn.id);
        let holds: Vec<String> = conn.holds.lock().drain().collect();
        for id in holds {
            self.release(&id, conn.id);
        }
    }

    /// Effective settings of a session (files re-read now). The session lock is held only to
    /// copy the header `cwd` and the overrides, never while reading files.
    pub fn session_settings(&self, session: &Session) -> settings::EffectiveSettings {
        let (cwd, overrides, rules, model) = {
            let state = session.read_state();
            (
                state.cwd().map(PathBuf::from),
                state.overrides.clone(),
                state.rules,
                state
                    .model
                    .as_ref()
                    .map(|m| (m.provider.clone(), m.id.clone())),
            )
        };
        let global = self.global_overrides.lock().clone();
        settings::effective(
            cwd.as_deref(),
            global.as_ref(),
            overrides.as_ref(),
            &settings::Defaults {
                retry: self.config.summarizer.retry,
                handoff: self.config.compaction.handoff,
            },
        )
        .for_session(rules, model.as_ref().map(|(p, i)| (p.as_str(), i.as_str())))
    }

    pub fn next_hook_seq(&self) -> u64 {
        self.hook_seq.fetch_add(1, Ordering::SeqCst)
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, RpcError> {
        self.registry.lock().by_id.get(id).cloned().ok_or_else(|| {
            RpcError::new(ErrorKind::UnknownSession, format!("Unknown session: {id}"))
        })
    }

    pub fn sessions(&self) -> Vec<Arc<Session>> {
        let mut v: Vec<Arc<Session>> = self.registry.lock().by_id.values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// The open session `location` joined by `conn`, if there is one.
    fn join_open(&self, location: &SessionRef, conn: &Connection) -> Option<Arc<Session>> {
        let reg = self.registry.lock();
        let id = reg.by_location.get(location)?;
        let s = reg.by_id.get(id)?.clone();
        s.holders.lock().insert(conn.id);
        conn.holds.lock().insert(id.clone());
        Some(s)
    }

    /// The open session `location`, or one made by `make`. `make` (reading and parsing the
    /// session) runs outside the registry lock, so a big open never stalls other clients;
    /// openers of the same session queue on its opening lock and then join the one session.
    pub fn open_or_insert(
        &self,
        location: &SessionRef,
        conn: &Connection,
        make: impl FnOnce() -> Result<SessionState, RpcError>,
    ) -> Result<(Arc<Session>, bool), RpcError> {
        if let Some(s) = self.join_open(location, conn) {
            return Ok((s, false));
        }
        let opening = self
            .opening
            .lock()
            .entry(location.clone())
            .or_default()
            .clone();
        let result = crate::cpu::blocking(|| {
            let _turn = opening.lock();
            if let Some(s) = self.join_open(location, conn) {
                return Ok((s, false));
            }
            self.insert_new(location, conn, make)
        });
        let mut table = self.opening.lock();
        if Arc::strong_count(&opening) <= 2 {
            table.remove(location);
        }
        result
    }

    /// Makes the state (a file session takes its lock first, in `store::Backend::open`) and
    /// registers the new session.
    fn insert_new(
        &self,
        location: &SessionRef,
        conn: &Connection,
        make: impl FnOnce() -> Result<SessionState, RpcError>,
    ) -> Result<(Arc<Session>, bool), RpcError> {
        let state = make()?;
        let mut reg = self.registry.lock();
        let id = format!("s{}", self.next_session.fetch_add(1, Ordering::SeqCst));
        let session = Arc::new(Session {
            id: id.clone(),
            location: location.clone(),
            state: gate::SessionLock::new(state),
            running: Mutex::new(None),
            slot: tokio::sync::Mutex::new(()),
            navigating: std::sync::atomic::AtomicBool::new(false),
            speculation: Default::default(),
            activity: Mutex::new(activity::Activity::default()),
            holders: Mutex::new(HashSet::from([conn.id])),
        });
        reg.by_location.insert(location.clone(), id.clone());
        reg.by_id.insert(id.clone(), session.clone());
        tracing::info!(session = %id, path = %location, connection = conn.id, "session opened");
        conn.holds.lock().insert(id);
        Ok((session, true))
    }

    /// Releases `conn`'s hold; the last release aborts any running compaction and forgets the
    /// session (unlocking the file). A deferred session that never reached disk is discarded.
    pub fn release(&self, session_id: &str, conn: ConnId) -> bool {
        let mut reg = self.registry.lock();
        let Some(s) = reg.by_id.get(session_id).cloned() else {
            return false;
        };
        let mut holders = s.holders.lock();
        let held = holders.remove(&conn);
        if holders.is_empty() {
            if let Some(token) = s.running.lock().as_ref() {
                token.cancel();
            }
            reg.by_id.remove(session_id);
            reg.by_location.remove(&s.location);
            tracing::info!(session = session_id, path = %s.location, "session closed");
        }
        let closed = holders.is_empty();
        drop(holders);
        drop(reg);
        if closed {
            lifecycle::speculation::discard(
                self,
                &s,
                lifecycle::speculation::DiscardReason::Closed,
            );
        }
        held
    }

    /// Sends an event to every subscribed connection, and records it in the session's
    /// [`activity::Activity`] (only its own lock is taken: callers may hold the session's state).
    /// The event's name comes from its payload type's declaration in `rpc::events`.
    pub fn emit<E: Message>(&self, session_id: &str, event: &E) {
        let params = crate::rpc::events::payload(event);
        let session = self.session(session_id).ok();
        if let Some(session) = &session {
            self.storage.publish(&session.location, E::NAME, &params);
        }
        self.emit_raw(session_id, session.as_deref(), E::NAME, &params);
    }

    /// [`Daemon::emit`] of an event already serialized (one another daemon announced), for
    /// `session` when it is open here.
    fn emit_raw(&self, session_id: &str, session: Option<&Session>, name: &str, params: &Value) {
        if let Some(session) = session {
            // Read back as typed: an event another daemon (of another version) sent that does
            // not parse still reaches the subscribers, it only is not folded in.
            match crate::rpc::events::Event::parse(name, params) {
                Ok(event) => session
                    .activity
                    .lock()
                    .observe(&event, crate::session::ids::now_ms()),
                Err(e) => tracing::debug!(session = session_id, error = %e, "event not recorded"),
            }
        }
        let conns: Vec<Arc<Connection>> = self.connections.lock().values().cloned().collect();
        for c in conns {
            if c.wants(session_id, name) {
                c.send_event(name, params);
            }
        }
    }

    /// Aborts the compaction or branch summary running for `session_id` (a client cancelled
    /// the request that started it, or went away); false when none runs or the session is
    /// unknown. The transport's one way into the lifecycle.
    pub fn abort_session(&self, session_id: &str) -> bool {
        self.session(session_id).is_ok_and(|s| lifecycle::abort(&s))
    }

    /// The open session `location`.
    pub fn open_at(&self, location: &SessionRef) -> Option<Arc<Session>> {
        let reg = self.registry.lock();
        let id = reg.by_location.get(location)?;
        reg.by_id.get(id).cloned()
    }

    /// Connections that registered `hook` for `session_id`, in registration order.
    fn hook_targets(
        &self,
        session_id: &str,
        hook: &str,
    ) -> Vec<(Arc<Connection>, connections::HookRegistration)> {
        let conns: Vec<Arc<Connection>> = self.connections.lock().values().cloned().collect();
        let mut targets: Vec<(Arc<Connection>, connections::HookRegistration)> = conns
            .into_iter()
            .filter_map(|c| c.hook_registration(session_id, hook).map(|r| (c, r)))
            .collect();
        targets.sort_by_key(|(_, r)| r.seq);
        targets
    }

    /// Whether any connection registered hook `H` for the session.
    pub fn has_hook<H: Message>(&self, session_id: &str) -> bool {
        !self.hook_targets(session_id, H::NAME).is_empty()
    }

    /// Asks every connection that registered hook `H` with `params` (its payload), in order,
    /// and parses each answer once into `H::Reply`; a timeout, an error, a disconnect or an
    /// answer that is no reply counts as no result (logged). `stop` ends the round early (Pi's
    /// `cancel`).
    ///
    /// Registrations whose `seq` is in `skip` were asked already (a speculation's hooks, at its
    /// install) and are not asked again; the answer lists the `seq` of every registration asked.
    pub async fn ask_hooks<H: HookRequest>(
        &self,
        session_id: &str,
        params: Value,
        skip: &[u64],
        cancel: &CancellationToken,
        stop: impl Fn(&H::Reply) -> bool,
    ) -> (Vec<H::Reply>, Vec<u64>) {
        let hook = H::NAME;
        let mut results = Vec::new();
        let mut asked = Vec::new();
        for (conn, registration) in self.hook_targets(session_id, hook) {
            if skip.contains(&registration.seq) {
                continue;
            }
            asked.push(registration.seq);
            let timeout = registration.timeout;
            tracing::info!(
                connection = conn.id,
                hook,
                session = session_id,
                timeout_ms = timeout.as_millis() as u64,
                "asking the client's hook handler"
            );
            let answer = tokio::select! {
                r = conn.request(hook, registration.shape(&params), timeout) => r,
                _ = cancel.cancelled() => {
                    conn.cancel_pending();
                    break;
                }
            };
            match answer {
                Ok(v) => {
                    if let Some(reply) = crate::rpc::events::reply::<H::Reply>(hook, &v) {
                        let done = stop(&reply);
                        results.push(reply);
                        if done {
                            break;
                        }
                    }
                }
                Err(PeerError::Timeout) => tracing::warn!(
                    connection = conn.id,
                    hook,
                    timeout_ms = timeout.as_millis() as u64,
                    "hook handler sent no reply in time; treated as no result (a handler with \
                     nothing to say must still reply, e.g. with null)"
                ),
                Err(PeerError::Disconnected) => tracing::warn!(
                    connection = conn.id,
                    hook,
                    "client went away before answering the hook; treated as no result"
                ),
                Err(PeerError::Error(e)) => tracing::warn!(
                    connection = conn.id,
                    hook,
                    error = %crate::json::stringify(&e),
                    "hook handler answered with an error; treated as no result"
                ),
            }
        }
        (results, asked)
    }

    /// The registrations of hook `H` for the session not in `asked` (see [`Daemon::ask_hooks`]).
    pub fn has_hook_besides<H: Message>(&self, session_id: &str, asked: &[u64]) -> bool {
        self.hook_targets(session_id, H::NAME)
            .iter()
            .any(|(_, r)| !asked.contains(&r.seq))
    }

    /// Sends a hook notification (`session_compact`, `session_compact_failed`).
    pub fn notify_hooks<H: Message>(&self, session_id: &str, notification: &H) {
        let (hook, params) = (H::NAME, crate::rpc::events::payload(notification));
        for (conn, registration) in self.hook_targets(session_id, hook) {
            let params = registration.shape(&params);
            conn.send(crate::rpc::wire::notification(hook, &params));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn model(provider: &str, id: &str) -> Model {
        Model {
            provider: provider.into(),
            id: id.into(),
            context_window: 200_000,
            max_tokens: 64_000,
            reasoning: None,
        }
    }

    fn config(text: &str) -> Config {
        Config::from_toml(text, Path::new("c.toml")).expect("valid config")
    }

    fn engine(daemon: &Daemon, m: Option<&Model>) -> Arc<SummaryEngine> {
        match daemon.engine_for(m) {
            Ok(e) => e,
            Err(e) => panic!("no engine: {}", e.message),
        }
    }

    #[test]
    fn a_configured_summarizer_is_built_once_whatever_the_session_model() {
        let daemon = Daemon::new(config(
            "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
        ));
        let first = engine(&daemon, Some(&model("anthropic", "a")));
        assert!(Arc::ptr_eq(&first, &engine(&daemon, None)));
        assert!(Arc::ptr_eq(
            &first,
            &engine(&daemon, Some(&model("openai", "b")))
        ));
        assert_eq!(daemon.engines.lock().len(), 1);
    }

    #[test]
    fn an_engine_following_the_session_model_is_built_once_per_model() {
        let daemon = Daemon::new(config(
            "[providers.anthropic]\napi = \"anthropic-messages\"\nbase_url = \"http://127.0.0.1:9\"\n",
        ));
        let sonnet = model("anthropic", "sonnet");
        let first = engine(&daemon, Some(&sonnet));
        assert!(Arc::ptr_eq(&first, &engine(&daemon, Some(&sonnet))));
        let haiku = engine(&daemon, Some(&model("anthropic", "haiku")));
        assert!(!Arc::ptr_eq(&first, &haiku));
        match (&*first, &*haiku) {
            (SummaryEngine::Llm { model: a, .. }, SummaryEngine::Llm { model: b, .. }) => {
                assert_eq!((a.id.as_str(), b.id.as_str()), ("sonnet", "haiku"));
            }
            _ => panic!("expected the session models' LLM engines"),
        }
        // Models of unconfigured providers, and no model, share the one extractive engine.
        let extractive = engine(&daemon, None);
        assert!(matches!(*extractive, SummaryEngine::Extractive { .. }));
        assert!(Arc::ptr_eq(
            &extractive,
            &engine(&daemon, Some(&model("openai", "gpt")))
        ));
        assert_eq!(daemon.engines.lock().len(), 3);
    }

    #[test]
    fn a_missing_key_is_reported_every_time_and_not_cached() {
        let daemon = Daemon::new(config(
            "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key_env = \"COMPACTD_SURELY_UNSET_VAR\"\n",
        ));
        for _ in 0..2 {
            let e = daemon.engine_for(None).err().map(|e| e.message);
            assert!(
                e.as_deref()
                    .is_some_and(|m| m.starts_with("No API key found for openai-completions.")),
                "{e:?}"
            );
        }
        assert!(daemon.engines.lock().is_empty());
    }
}
