//! Sessions in PostgreSQL, shared by many daemons (beyond Pi: `[storage] backend = "postgres"`).
//!
//! The design is the well-trodden one of agent frameworks that keep conversation state in
//! PostgreSQL: an append-only entry table, serialization of writers by the database, and
//! LISTEN/NOTIFY as a wake-up, never as the record.
//!
//! - **Lines byte for byte.** `compactd_entries.line` holds each entry's line exactly as Pi
//!   would write it (`bytea`: no re-encoding, no JSON normalisation); `export` concatenates them.
//!   No daemon ever re-serialises what another wrote.
//! - **Appends: optimistic versions.** An entry's `seq` is the head the writer last saw plus one,
//!   and `(namespace, header_id, seq)` is the primary key: the insert is the check, so two daemons
//!   appending at once cannot both extend the same head. The loser gets
//!   [`StoreError::Conflict`], reads the winner's lines and writes again under the new leaf.
//!   Chosen over advisory transaction locks because an append is then one statement, one round
//!   trip, and no lock outlives a statement even if a daemon dies mid-append.
//! - **Appends of several sessions share a statement.** First tries that queue while another
//!   is being written go to the server together, as arrays in one statement that only *tries*
//!   each session's append lock, so a session held by another daemon never holds up the rest
//!   (see [`Database::append_gathered`]). `appendMessage` awaits its first try
//!   ([`SessionStorage::first_try`]) rather than blocking a worker thread on it.
//! - **One compaction at a time: a lease.** `pg_try_advisory_lock` on a key derived from the
//!   header id, held by a connection of its own for the whole compaction. The lock belongs to
//!   that connection, so a daemon killed mid-compaction releases it when the server notices the
//!   connection is gone, and another daemon can compact at once. A compaction's entry is one
//!   row: no half entry is ever visible.
//! - **Events across daemons.** Every event of a stored session is inserted into
//!   `compactd_events` and followed by `NOTIFY compactd_events`. Each daemon LISTENs, and on a
//!   notification (or every [`CATCH_UP_EVERY`], so a missed notification loses nothing) reads
//!   the events after the last id it delivered.
//!
//! The driver is `tokio-postgres`: asynchronous, no compile-time database (unlike sqlx's
//! checked queries, which need one to build), LISTEN/NOTIFY through the connection's message
//! stream, and advisory locks as plain SQL. It runs on a small runtime of its own, so the
//! storage trait's blocking calls work from any thread (under the daemon's session lock they go
//! through `cpu::blocking`), and a database that is down surfaces as
//! [`StoreError::Unavailable`] (`storage_unavailable`) on the call that needed it, never as a
//! hang: every connection attempt has a timeout, and a lost connection is re-made on next use.
//!
//! - **Connections: a pool** (`deadpool-postgres`). Every statement runs on a connection taken
//!   from the pool for that call alone, and a transaction (a session's creation or import, the
//!   schema) holds its connection until it commits or rolls back: no statement of another
//!   session can ever land inside it. (One shared, pipelined client did exactly that: a create
//!   that failed rolled back other sessions' appends that had already been acknowledged.)
//!   deadpool was chosen over bb8 and r2d2 for being built for tokio-postgres: it checks a
//!   connection cheaply before handing it out (a closed one is dropped and re-made), has no
//!   background reaper thread, and its `Object` derefs to the driver's `Client`, so every query
//!   stays plain tokio-postgres. Connections that must outlive a call (the compaction lease,
//!   whose advisory lock belongs to its connection; the LISTEN connection; an exclusive append
//!   transaction) are made apart from the pool, so returning one can never hand a lock on.
//! - **Errors by meaning.** A value the database cannot store (a NUL in a text column, any
//!   SQL data exception) is [`StoreError::Invalid`], naming the field (`invalid_params`); only a
//!   database that cannot be reached is [`StoreError::Unavailable`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, NoTls};

/// A connection taken from the pool for one call (derefs to the driver's `Client`).
type Pooled = deadpool_postgres::Object;

/// How many connections the pool keeps open at most.
const POOL_SIZE: usize = 16;

use super::backend::{
    Address, Backend, Deliver, FirstTry, Health, NewSession, Opened, Rebase, RemoteEvent,
    SessionStorage, StoredSummary, Verdict,
};
use super::{Durability, SessionRef, StoreError};
use crate::session::{read_session_bytes, Entry, EntryKind, ReadOutcome, SessionTree};

/// How often a daemon reads other daemons' events even without a notification.
pub const CATCH_UP_EVERY: Duration = Duration::from_secs(1);

/// How long a connection attempt may take before the store counts as unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The prefix of a stored session's location (its registry key, its `path` in `SessionInfo`).
pub const LOCATION_PREFIX: &str = "postgres:";

/// The version [`MIGRATIONS`] brings a database to (its last `compactd_schema` row): what a
/// check that the schema is in place, or a test waiting for it, looks for.
pub const SCHEMA_VERSION: i64 = 3;

/// The schema, applied at start-up (and after every reconnection) under a transaction-level
/// advisory lock, so daemons starting together never race on the DDL.
const MIGRATIONS: &str = "
SELECT pg_advisory_xact_lock(7263001);
CREATE TABLE IF NOT EXISTS compactd_schema (version integer PRIMARY KEY);
CREATE TABLE IF NOT EXISTS compactd_sessions (
    header_id text PRIMARY KEY,
    cwd text NOT NULL,
    header bytea NOT NULL,
    created timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS compactd_sessions_by_cwd ON compactd_sessions (cwd, created);
CREATE TABLE IF NOT EXISTS compactd_entries (
    header_id text NOT NULL REFERENCES compactd_sessions ON DELETE CASCADE,
    seq bigint NOT NULL,
    id text,
    parent_id text,
    type text NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (header_id, seq)
);
CREATE TABLE IF NOT EXISTS compactd_events (
    id bigserial PRIMARY KEY,
    header_id text NOT NULL,
    origin text NOT NULL,
    name text NOT NULL,
    payload text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO compactd_schema (version) VALUES (1) ON CONFLICT DO NOTHING;
ALTER TABLE compactd_sessions ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT 'default';
CREATE INDEX IF NOT EXISTS compactd_sessions_by_namespace ON compactd_sessions (namespace, cwd, created);
ALTER TABLE compactd_events ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT 'default';
INSERT INTO compactd_schema (version) VALUES (2) ON CONFLICT DO NOTHING;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compactd_schema WHERE version = 3) THEN
        -- Header ids unique per namespace, not across them: one tenant's import of a session
        -- whose id another tenant holds must go as for an id nobody holds.
        ALTER TABLE compactd_entries ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT 'default';
        UPDATE compactd_entries e SET namespace = s.namespace FROM compactd_sessions s
         WHERE s.header_id = e.header_id AND s.namespace <> 'default';
        ALTER TABLE compactd_entries DROP CONSTRAINT IF EXISTS compactd_entries_header_id_fkey;
        ALTER TABLE compactd_entries DROP CONSTRAINT IF EXISTS compactd_entries_pkey;
        ALTER TABLE compactd_sessions DROP CONSTRAINT IF EXISTS compactd_sessions_pkey;
        ALTER TABLE compactd_sessions ADD PRIMARY KEY (namespace, header_id);
        ALTER TABLE compactd_entries ADD PRIMARY KEY (namespace, header_id, seq);
        ALTER TABLE compactd_entries ADD FOREIGN KEY (namespace, header_id)
            REFERENCES compactd_sessions (namespace, header_id) ON DELETE CASCADE;
        INSERT INTO compactd_schema (version) VALUES (3);
    END IF;
END $$;
";

/// A stored session's lines as read: the header line and every entry line, the last seq, and
/// the working directory it was created for.
struct Stored {
    text: Vec<u8>,
    head: i64,
    cwd: String,
}

impl Stored {
    /// The session as Pi would load its export, and the last seq.
    fn into_tree(self, header_id: &str) -> Result<(SessionTree, i64), StoreError> {
        match read_session_bytes(self.text.into()) {
            ReadOutcome::Session(p) => Ok((SessionTree::from_parsed(p), self.head)),
            ReadOutcome::NotASession(why) => Err(StoreError::NotASession(
                location(header_id),
                format!(": {why}"),
            )),
            ReadOutcome::Empty => Err(StoreError::NotASession(location(header_id), String::new())),
        }
    }
}

/// The location of the stored session `header_id` (for messages).
pub fn location(header_id: &str) -> PathBuf {
    PathBuf::from(format!("{LOCATION_PREFIX}{header_id}"))
}

mod why;

/// The name of the stored session `header_id` (`postgres:<id>`).
fn name(header_id: &str) -> SessionRef {
    SessionRef::at(&location(header_id))
}

/// The store cannot be used for a reason the driver's error `e` gives: its causes and the fix
/// (`why::explain`).
fn unavailable(e: impl std::borrow::Borrow<tokio_postgres::Error>) -> StoreError {
    StoreError::Unavailable(why::explain(e.borrow(), None))
}

/// [`unavailable`] for a failed connection: the message also says where it went.
fn cannot_connect(e: tokio_postgres::Error, config: &tokio_postgres::Config) -> StoreError {
    StoreError::Unavailable(why::explain(&e, Some(config)))
}

/// The store cannot be used, for a reason of compactd's own.
fn down(why: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(why.to_string())
}

/// A task of the database's runtime ended without answering (it panicked, or the runtime is
/// shutting down): the store is unavailable.
fn no_answer() -> StoreError {
    down("the database task ended without an answer")
}

/// What a failed statement means: a value the database refused to store (SQL class 22, data
/// exception: a NUL in a text column, say) is the caller's input, `what` naming it; anything
/// else means the database could not do the work.
fn statement_error(e: tokio_postgres::Error, what: &str) -> StoreError {
    match e.code() {
        Some(c) if c.code().starts_with("22") => StoreError::Invalid(format!(
            "{what}: the database cannot store this value ({})",
            e.as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned())
        )),
        _ => unavailable(e),
    }
}

/// Refuses a text column's value the database cannot hold (PostgreSQL's `text` has no NUL),
/// before anything is sent, naming the field.
fn storable(field: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::Invalid(format!(
            "{field} contains a NUL character, which the database cannot store"
        )));
    }
    Ok(())
}

/// One database of sessions, shared by every stored session of this daemon.
pub struct Database {
    runtime: Option<tokio::runtime::Runtime>,
    config: tokio_postgres::Config,
    /// The connections statements and transactions run on, one call at a time each.
    pool: deadpool_postgres::Pool,
    /// Whether the schema was applied (on the first connection that worked).
    migrated: std::sync::atomic::AtomicBool,
    /// This daemon's name in `compactd_events.origin`: its own events are not delivered back.
    origin: String,
    /// The deployment this daemon belongs to (`[storage] namespace`): it sees, opens, lists
    /// and hears of no session of another.
    namespace: String,
    /// Events to publish, in order (one publisher task drains it).
    outbox: tokio::sync::mpsc::UnboundedSender<(String, String, String)>,
    outbox_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<(String, String, String)>>>,
    /// Idle connections for exclusive appends (kept, so a lost race costs no new connection
    /// and no statement preparation).
    spare: Mutex<Vec<Spare>>,
    /// `[storage] durability`, mapped onto each write's commit (see [`Commit`]).
    durability: Durability,
    /// The queue of first tries that share statements ([`Database::append_gathered`]), and
    /// the task that drains it, started by the first.
    gathered: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Gathered>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Parses a connection string (`postgresql://…` URL or `key=value` pairs), with the store's
/// connection timeout.
pub fn parse_url(url: &str) -> Result<tokio_postgres::Config, String> {
    let mut config = tokio_postgres::Config::from_str(url)
        .map_err(|e| format!("invalid PostgreSQL connection string: {e}"))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    Ok(config)
}

/// The `application_name` of a daemon's connections, unless the connection string sets one: it
/// names the daemon's origin, so another daemon can tell whether it is still connected.
fn application_name(origin: &str) -> String {
    format!("compactd/{origin}")
}

impl Database {
    /// The deployment whose sessions this database handle shows.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A database at `url`. Nothing is connected yet: the first call connects and applies the
    /// migrations (see [`Database::check`] to do it at start-up).
    pub fn open(
        url: &str,
        namespace: &str,
        durability: Durability,
    ) -> Result<Arc<Database>, String> {
        let mut config = parse_url(url)?;
        let origin = uuid::Uuid::new_v4().to_string();
        if config.get_application_name().is_none() {
            config.application_name(application_name(&origin));
        }
        if Commit::asynchronous_by_default(durability) {
            // Every commit of this daemon's connections returns before its WAL is flushed,
            // unless the write's durability asks for the flush (`Commit::Flushed`).
            let options = match config.get_options() {
                Some(o) => format!("{o} -c synchronous_commit=off"),
                None => "-c synchronous_commit=off".to_owned(),
            };
            config.options(&options);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("compactd-postgres")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the database runtime: {e}"))?;
        let (outbox, outbox_rx) = tokio::sync::mpsc::unbounded_channel();
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(POOL_SIZE)
            // The connection returned last is handed out first: the few that carry a steady
            // stream of appends stay warm (their server process just ran, its caches hot),
            // instead of every statement going to the connection idle longest. Four clients
            // appending through one daemon, seven rounds each against files in the same run,
            // twice: 0.71x and 0.56x files (median) against 0.58x and 0.53x first in, first
            // out; faster in 12 of the 14 paired rounds.
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| format!("cannot set up the database pool: {e}"))?;
        Ok(Arc::new(Database {
            runtime: Some(runtime),
            config,
            pool,
            migrated: std::sync::atomic::AtomicBool::new(false),
            origin,
            namespace: namespace.to_owned(),
            outbox,
            outbox_rx: Mutex::new(Some(outbox_rx)),
            spare: Mutex::new(Vec::new()),
            durability,
            gathered: std::sync::OnceLock::new(),
        }))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        match &self.runtime {
            Some(rt) => rt.handle(),
            None => unreachable!("the runtime lives as long as the database"),
        }
    }

    /// Runs `f` on the database's runtime and waits for it, from any thread (an async worker
    /// hands its other tasks on meanwhile: `cpu::blocking`). A task that ended without an
    /// answer (it panicked, or the runtime is shutting down) is the store being unavailable.
    fn block_on<T: Send + 'static>(
        &self,
        f: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = tx.send(f.await);
        });
        crate::cpu::blocking(|| rx.recv()).map_err(|_| no_answer())?
    }

    /// Runs `f` on the database's runtime, awaited from another runtime.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.handle().spawn(f).await.map_err(down)
    }

    async fn connect_raw(
        config: &tokio_postgres::Config,
    ) -> Result<
        (
            Client,
            tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
        ),
        StoreError,
    > {
        config
            .connect(NoTls)
            .await
            .map_err(|e| cannot_connect(e, config))
    }

    /// A connection of the pool for one call; the schema is applied on the first one. Its
    /// transaction, if the caller begins one, is its own: no other call uses the connection
    /// until it is returned.
    async fn client(self: &Arc<Self>) -> Result<Pooled, StoreError> {
        use std::sync::atomic::Ordering;
        let client = self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => cannot_connect(e, &self.config),
            e => down(format!("no database connection: {e}")),
        })?;
        if !self.migrated.load(Ordering::Acquire) {
            // The notices of `IF NOT EXISTS` ("already exists, skipping") are no news.
            client
                .batch_execute(&format!(
                    "BEGIN;SET LOCAL client_min_messages = warning;{MIGRATIONS}COMMIT;"
                ))
                .await
                .map_err(unavailable)?;
            self.migrated.store(true, Ordering::Release);
        }
        Ok(client)
    }

    /// Connects and applies the migrations now (start-up), so a bad URL or a database that is
    /// down is reported at once; the daemon keeps running and reconnects on later calls.
    pub fn check(self: &Arc<Self>) -> Result<(), StoreError> {
        let db = self.clone();
        self.block_on(async move { db.client().await.map(|_| ()) })
    }

    /// Creates the stored session: its header and first entries, in one transaction on a
    /// connection of its own. [`StoreError::Conflict`] if a session with this header id exists;
    /// [`StoreError::Invalid`] for a value the database cannot store.
    fn create(
        self: &Arc<Self>,
        header_id: String,
        cwd: String,
        header: Vec<u8>,
        entries: Vec<EntryRow>,
    ) -> Result<(), StoreError> {
        storable("headerId", &header_id)?;
        storable("cwd", &cwd)?;
        entries.iter().try_for_each(EntryRow::storable)?;
        let db = self.clone();
        self.block_on(async move {
            let mut client = db.client().await?;
            let result: Result<(), tokio_postgres::Error> = async {
                // Rolled back when dropped unfinished: only this connection's statements.
                let tx = client.transaction().await?;
                // A new session is as durable as a new file.
                let commit = Commit::of(db.durability, db.durability.syncs_new_file());
                if let Some(set) = commit.set_local() {
                    tx.batch_execute(set).await?;
                }
                let insert = tx.prepare_cached(INSERT_ENTRY).await?;
                tx.execute(
                    "INSERT INTO compactd_sessions (header_id, cwd, header, namespace)
                     VALUES ($1, $2, $3, $4)",
                    &[&header_id, &cwd, &header, &db.namespace],
                )
                .await?;
                // Pipelined: every entry's insert is sent without waiting for the one before.
                let inserts = (1i64..).zip(&entries).map(|(seq, row)| {
                    insert_entry(&*tx, &insert, &db.namespace, &header_id, seq, row)
                });
                futures_util::future::try_join_all(inserts).await?;
                tx.commit().await
            }
            .await;
            result.map_err(|e| match e.code() {
                Some(c) if *c == SqlState::UNIQUE_VIOLATION => {
                    StoreError::Conflict(location(&header_id))
                }
                _ => statement_error(e, "session"),
            })
        })
    }

    /// The header line and every entry line of a stored session, in order, with the last seq.
    /// A session of another namespace is no session here.
    fn read_all(self: &Arc<Self>, header_id: &str) -> Result<Stored, StoreError> {
        let db = self.clone();
        let header_id = header_id.to_owned();
        self.block_on(async move {
            let client = db.client().await?;
            let Some(row) = client
                .query_opt(
                    "SELECT header, cwd FROM compactd_sessions
                     WHERE header_id = $1 AND namespace = $2",
                    &[&header_id, &db.namespace],
                )
                .await
                .map_err(unavailable)?
            else {
                return Err(StoreError::NoSuchStored(header_id));
            };
            let mut text: Vec<u8> = row.get(0);
            let cwd: String = row.get(1);
            text.push(b'\n');
            let statement = client
                .prepare_cached(LINES_AFTER)
                .await
                .map_err(unavailable)?;
            let head = lines_after(
                &**client,
                &statement,
                &db.namespace,
                &header_id,
                0,
                &mut text,
            )
            .await?;
            Ok(Stored { text, head, cwd })
        })
    }

    /// Loads a stored session as Pi would load its export.
    pub fn load(self: &Arc<Self>, header_id: &str) -> Result<(SessionTree, i64), StoreError> {
        self.read_all(header_id)?.into_tree(header_id)
    }

    /// Loads a session file's lines into the store, byte for byte (the header line as it is in
    /// the file; entries as their lines). Returns the header id.
    pub fn import(
        self: &Arc<Self>,
        header_line: &[u8],
        tree: &SessionTree,
    ) -> Result<String, StoreError> {
        let field = |k: &str| {
            tree.header
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let header_id = field("id").ok_or_else(|| {
            StoreError::NotASession(
                PathBuf::from("<import>"),
                ": its `session` header has no string `id`".into(),
            )
        })?;
        let cwd = field("cwd").unwrap_or_default();
        let rows = tree
            .entries()
            .iter()
            .map(|e| EntryRow::of(e))
            .collect::<Result<_, _>>()?;
        self.create(header_id.clone(), cwd, header_line.to_vec(), rows)?;
        Ok(header_id)
    }

    /// The stored sessions, newest first, of one working directory or all.
    pub fn list(self: &Arc<Self>, cwd: Option<String>) -> Result<Vec<StoredSummary>, StoreError> {
        let db = self.clone();
        self.block_on(async move {
            let client = db.client().await?;
            let rows = client
                .query(
                    "SELECT s.header_id, s.cwd, (extract(epoch FROM s.created) * 1000)::bigint,
                            (SELECT count(*) FROM compactd_entries e
                              WHERE e.namespace = s.namespace AND e.header_id = s.header_id)
                     FROM compactd_sessions s
                     WHERE s.namespace = $2 AND ($1::text IS NULL OR s.cwd = $1)
                     ORDER BY s.created DESC, s.header_id",
                    &[&cwd, &db.namespace],
                )
                .await
                .map_err(unavailable)?;
            Ok(rows
                .iter()
                .map(|r| StoredSummary {
                    header_id: r.get(0),
                    cwd: r.get(1),
                    created_ms: r.get(2),
                    entries: r.get(3),
                })
                .collect())
        })
    }

    /// Takes the compaction lease of a stored session, waiting while another daemon holds it
    /// (until `cancel`). The lease is released when it is dropped, or when this daemon dies.
    pub async fn lease(
        self: &Arc<Self>,
        header_id: &str,
        cancel: tokio_util::sync::CancellationToken,
        unfinished: super::Unfinished,
    ) -> Result<Option<Lease>, StoreError> {
        let config = self.config.clone();
        let header_id = header_id.to_owned();
        let origin = self.origin.clone();
        let namespace = self.namespace.clone();
        self.run(async move {
            let (client, connection) = Self::connect_raw(&config).await?;
            let task = tokio::spawn(async move {
                let _ = connection.await;
            });
            let mut waited = false;
            loop {
                let got: bool = client
                    .query_one(
                        "SELECT pg_try_advisory_lock(hashtextextended('compactd:' || $2 || '/' || $1, 0))",
                        &[&header_id, &namespace],
                    )
                    .await
                    .map_err(unavailable)?
                    .get(0);
                if got {
                    if waited {
                        tracing::info!(header_id = %header_id, "took the compaction lease another daemon released");
                    }
                    let orphaned =
                        orphaned(&client, &namespace, &header_id, &origin, unfinished).await;
                    return Ok(Some(Lease {
                        _client: client,
                        task,
                        orphaned,
                    }));
                }
                if !waited {
                    tracing::info!(header_id = %header_id, "another daemon is compacting this session; waiting for its lease");
                    waited = true;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(None),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        })
        .await?
    }

    /// Queues an event of a stored session for the other daemons (in order, never blocking).
    pub fn publish(&self, header_id: &str, name: &str, payload: &Value) {
        let _ = self
            .outbox
            .send((header_id.to_owned(), name.to_owned(), payload.to_string()));
    }

    /// Starts the publisher of this daemon's events and the listener of the others', which
    /// hands each to `deliver` (until the daemon is gone).
    pub fn start_events(self: &Arc<Self>, deliver: Deliver) {
        let Some(mut outbox) = self.outbox_rx.lock().take() else {
            return;
        };
        let weak: Weak<Database> = Arc::downgrade(self);
        self.handle().spawn(async move {
            while let Some((header_id, name, payload)) = outbox.recv().await {
                let Some(db) = weak.upgrade() else { return };
                let sent = async {
                    let client = db.client().await?;
                    client
                        .execute(
                            "WITH e AS (INSERT INTO compactd_events (header_id, origin, name, payload, namespace)
                                        VALUES ($1, $2, $3, $4, $5) RETURNING id)
                             SELECT pg_notify('compactd_events', (SELECT id::text FROM e))",
                            &[&header_id, &db.origin, &name, &payload, &db.namespace],
                        )
                        .await
                        .map_err(unavailable)
                }
                .await;
                if let Err(e) = sent {
                    tracing::warn!(header_id = %header_id, event = %name, error = %e, "could not publish an event to the other daemons");
                }
            }
        });
        let weak: Weak<Database> = Arc::downgrade(self);
        self.handle()
            .spawn(async move { listen(weak, deliver).await });
    }
}

/// The compaction lease of one stored session: the advisory lock lives as long as this
/// connection.
pub struct Lease {
    _client: Client,
    task: tokio::task::JoinHandle<()>,
    /// What another daemon started under this lease and never ended (see [`orphaned`]).
    pub orphaned: Option<Value>,
}

/// With the lease just taken: the payload of the `unfinished.start` event another daemon
/// published last for the session without a later `unfinished.end`, when that daemon is gone
/// (none of its connections remains: they close when it dies). Its subscribers everywhere
/// saw the start and will never see its end from it. A daemon still connected finished
/// normally and is publishing its end; a connection string with its own `application_name`
/// cannot tell, and nothing is reported.
async fn orphaned(
    client: &Client,
    namespace: &str,
    header_id: &str,
    own: &str,
    unfinished: super::Unfinished,
) -> Option<Value> {
    let row = client
        .query_opt(
            "SELECT origin, name, payload FROM compactd_events
             WHERE namespace = $4 AND header_id = $1 AND name IN ($2, $3)
             ORDER BY id DESC LIMIT 1",
            &[&header_id, &unfinished.start, &unfinished.end, &namespace],
        )
        .await
        .ok()??;
    let (origin, name, payload): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    if name != unfinished.start || origin == own {
        return None;
    }
    let app = application_name(&origin);
    // Its other connections may outlive the lease's by moments: the server notices each close
    // on its own.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let alive: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .ok()?
            .get(0);
        if alive == 0 {
            tracing::info!(header_id, daemon = %origin, "the daemon that was compacting this session is gone; ending its compaction");
            return serde_json::from_str(&payload).ok();
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Dropping the client ends the connection (and with it the lock); the task then ends.
        self.task.abort();
    }
}

/// The columns of one entry row.
#[derive(Debug, Clone)]
struct EntryRow {
    id: Option<String>,
    parent_id: Option<String>,
    kind: &'static str,
    line: Vec<u8>,
}

impl EntryRow {
    /// Whether the database can store the row's text columns.
    fn storable(&self) -> Result<(), StoreError> {
        storable("entry id", self.id.as_deref().unwrap_or(""))?;
        storable("entry parentId", self.parent_id.as_deref().unwrap_or(""))
    }

    /// The parameters of an insert of this row at `seq` of `header_id` in `namespace`, in the
    /// order of [`INSERT_ENTRY`], [`APPEND_ENTRY`] and [`APPEND_OR_READ`].
    fn params<'a>(
        &'a self,
        namespace: &'a &'a str,
        header_id: &'a &'a str,
        seq: &'a i64,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 7] {
        [
            header_id,
            seq,
            &self.id,
            &self.parent_id,
            &self.kind,
            &self.line,
            namespace,
        ]
    }

    /// The row of `e`; an entry imported from a file reads its line from there, which can
    /// fail ([`StoreError::LineGone`]).
    fn of(e: &Entry) -> Result<EntryRow, StoreError> {
        Ok(EntryRow {
            id: e.id_owned(),
            parent_id: e.parent_id.as_deref().map(str::to_owned),
            kind: e.kind.type_name(),
            line: e.raw()?.to_vec(),
        })
    }
}

/// How a write's commit meets `[storage] durability`, exactly as a file append does
/// (`proto-docs/storage.md`): what the files backend `fdatasync`s before the reply is committed
/// with `synchronous_commit = on` (the reply waits for the WAL flush); what it only hands to the
/// OS is committed with `synchronous_commit = off` (the reply does not wait: the commit is in
/// the server's memory, and a crash of the server or its machine may lose the newest ones, as
/// a power loss loses a file's newest unsynced lines; a crash of compactd loses nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// The connection's default, `synchronous_commit = off`.
    Unflushed,
    /// `synchronous_commit = on` for this transaction.
    Flushed,
    /// The connection's default is the server's own (`durability = "always"`).
    ServerDefault,
}

impl Commit {
    /// Whether the daemon's connections commit without waiting for the flush unless told:
    /// every durability but `always`.
    fn asynchronous_by_default(durability: Durability) -> bool {
        durability != Durability::Always
    }

    /// The commit of a write that `durability` syncs (`syncs`: the files backend would
    /// `fdatasync` it) or not.
    fn of(durability: Durability, syncs: bool) -> Commit {
        match (Commit::asynchronous_by_default(durability), syncs) {
            (false, _) => Commit::ServerDefault,
            (true, true) => Commit::Flushed,
            (true, false) => Commit::Unflushed,
        }
    }

    /// The statement that makes a transaction's commit this one, if any.
    fn set_local(self) -> Option<&'static str> {
        (self == Commit::Flushed).then_some("SET LOCAL synchronous_commit = on")
    }
}

/// Inserts one entry at `seq`. The statement first takes the session's append lock
/// (`pg_advisory_xact_lock`, held to the end of its transaction), so it waits while another
/// daemon holds the lock to catch up and append after losing a race (see
/// [`StoredSession::exclusive`]): optimistic appends never starve that daemon.
const INSERT_ENTRY: &str =
    "INSERT INTO compactd_entries (namespace, header_id, seq, id, parent_id, type, line)
     SELECT $7, $1, $2, $3, $4, $5, $6
       FROM (SELECT pg_advisory_xact_lock(hashtextextended('compactd-append:' || $7 || '/' || $1, 0))) lock";

/// [`INSERT_ENTRY`] as the first try of an append at the head a daemon knows: when another
/// daemon wrote that seq first, nothing is inserted and no row comes back (the caller then
/// reads what won). The insert alone: the retries' [`APPEND_OR_READ`] also returns the winner's
/// lines, and that reading (a `UNION ALL` over the table under `NOT EXISTS`, sorted) cost
/// every append the executor set-up of its nodes, even never run: the server's CPU per
/// statement went from 88–100 µs to 58 µs without it (pgbench, four clients, prepared,
/// 2 cores), and a lost race is the rare case.
///
/// The lock is taken in a subquery rather than a `WITH` (which adds a CTE scan to every
/// execution): one row a statement, one connection, pgbench in the same run, 18.8–19.1k
/// statements/s against 14.5–17.7k.
const APPEND_ENTRY: &str =
    "INSERT INTO compactd_entries (namespace, header_id, seq, id, parent_id, type, line)
     SELECT $7, $1, $2, $3, $4, $5, $6
       FROM (SELECT pg_advisory_xact_lock(hashtextextended('compactd-append:' || $7 || '/' || $1, 0))) lock
     ON CONFLICT (namespace, header_id, seq) DO NOTHING
     RETURNING seq";

/// [`APPEND_ENTRY`] for the retries after a lost race, where races come in runs: when another
/// daemon wrote that seq first, the lines from it on are returned instead (as the statement's
/// snapshot sees them), so losing again costs no extra round trip to learn what won. The
/// first column says whether the row was inserted.
const APPEND_OR_READ: &str =
    "WITH lock AS (SELECT pg_advisory_xact_lock(hashtextextended('compactd-append:' || $7 || '/' || $1, 0))),
     ins AS (INSERT INTO compactd_entries (namespace, header_id, seq, id, parent_id, type, line)
             SELECT $7, $1, $2, $3, $4, $5, $6 FROM lock
             ON CONFLICT (namespace, header_id, seq) DO NOTHING
             RETURNING seq)
     SELECT true, seq, ''::bytea FROM ins
     UNION ALL
     SELECT false, e.seq, e.line FROM compactd_entries e
      WHERE e.namespace = $7 AND e.header_id = $1 AND e.seq >= $2 AND NOT EXISTS (SELECT 1 FROM ins)
     ORDER BY 2";

/// The first tries of appends gathered from several sessions ([`Database::append_gathered`]),
/// as one statement: the rows come as arrays, one element per append. Each session's append
/// lock is only *tried* (`pg_try_advisory_xact_lock`), so the statement never waits: a session
/// whose lock another daemon holds (catching up after a lost race) is left out rather than
/// holding up every other session of the statement, and its append is sent again alone, with
/// [`APPEND_ENTRY`], which waits. A try never waits, so the order the locks are taken in
/// cannot deadlock. Returns the appends that were inserted; a row left out was either lost
/// (its seq was taken) or not locked, which the lone statement tells apart.
///
/// The try is the filter of the array scan itself, once per row: a statement holds at most
/// one append of a session (its state is locked across the append), and were there two, the
/// second try in the same transaction would answer as the first (advisory locks are
/// re-entrant). The earlier form, which took each distinct session's lock in a materialized
/// subquery and joined the rows against it, cost the server twice the executor nodes: two rows
/// a statement, one connection, pgbench in the same run: 7.4–8.4k statements/s against
/// 9.2–12.9k in this form.
const APPEND_GATHERED: &str =
    "INSERT INTO compactd_entries (namespace, header_id, seq, id, parent_id, type, line)
     SELECT $7, header_id, seq, id, parent_id, type, line
       FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bytea[])
            AS t(header_id, seq, id, parent_id, type, line)
      WHERE pg_try_advisory_xact_lock(hashtextextended('compactd-append:' || $7::text || '/' || header_id, 0))
     ON CONFLICT (namespace, header_id, seq) DO NOTHING
     RETURNING header_id, seq";

/// How many gathered statements may be in flight at once. While they all are, new appends
/// queue, and the next statement takes every one of them: the busier the daemon, the more
/// rows share a statement (and the server's per-statement work, its parse of the parameters,
/// its executor set-up, its commit). One: with two, four clients appending through one daemon
/// reached 0.53x files (median of seven rounds in the same run) against 0.64x with one, the
/// statements carrying fewer rows each for the same server work; two or four pipelined on
/// one connection were no faster than one either.
const GATHERED_IN_FLIGHT: usize = 1;

/// How long an append gathered alone, waiting for its session's append lock, may keep the
/// next gathered statement from being sent: an append takes well under a millisecond, a lock
/// another daemon holds to catch up after a lost race a few.
const ALONE_HOLDS_SLOT: Duration = Duration::from_millis(2);

/// The most appends one gathered statement carries.
const MAX_GATHERED: usize = 64;

/// One append's first try, waiting in [`Database::append_gathered`]'s queue: the row at
/// `seq` of `header_id`, and where its answer goes (inserted, or lost).
struct Gathered {
    header_id: String,
    seq: i64,
    row: EntryRow,
    answer: Answer,
}

/// Where a gathered append's answer goes: a thread blocked on it, or a task awaiting it.
enum Answer {
    Blocked(std::sync::mpsc::SyncSender<Result<bool, StoreError>>),
    Awaited(tokio::sync::oneshot::Sender<Result<bool, StoreError>>),
}

impl Answer {
    /// Answers (nobody hears it if the asker is gone).
    fn send(self, result: Result<bool, StoreError>) {
        let _ = match self {
            Answer::Blocked(tx) => tx.try_send(result).map_err(|_| ()),
            Answer::Awaited(tx) => tx.send(result).map_err(|_| ()),
        };
    }
}

impl Database {
    /// The first try of an append at `seq` of `header_id`, in autocommit on the connection's
    /// default commit: whether it was inserted (`false`: another daemon wrote that seq
    /// first). Appends of this daemon's sessions that arrive while earlier ones are being
    /// written share one statement ([`APPEND_GATHERED`]): the server's work per append falls
    /// with the number in a statement (pgbench on 2 cores, prepared, 4 connections: 32k
    /// one-row statements/s; 41k rows/s two rows at a time, 50k four at a time). An append
    /// of one session never waits behind another: one daemon has at most one append of a
    /// session in flight (the session's state is locked across it), and a gathered statement
    /// never waits for a lock.
    fn append_gathered(
        self: &Arc<Self>,
        header_id: String,
        seq: i64,
        row: EntryRow,
    ) -> Result<bool, StoreError> {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        self.gather(Gathered {
            header_id,
            seq,
            row,
            answer: Answer::Blocked(answer),
        })?;
        crate::cpu::blocking(|| answered.recv()).map_err(|_| no_answer())?
    }

    /// [`Database::append_gathered`] for a caller that awaits the answer instead of blocking
    /// a thread on it.
    fn append_gathered_awaited(
        self: &Arc<Self>,
        header_id: String,
        seq: i64,
        row: EntryRow,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send + 'static {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let queued = self.gather(Gathered {
            header_id,
            seq,
            row,
            answer: Answer::Awaited(answer),
        });
        async move {
            queued?;
            answered.await.map_err(|_| no_answer())?
        }
    }

    /// Queues `append` for the next gathered statement (the task that sends them starts with
    /// the first).
    fn gather(self: &Arc<Self>, append: Gathered) -> Result<(), StoreError> {
        let queue = self.gathered.get_or_init(|| {
            let (queue, waiting) = tokio::sync::mpsc::unbounded_channel();
            self.handle().spawn(gather(Arc::downgrade(self), waiting));
            queue
        });
        queue
            .send(append)
            .map_err(|_| down("the database's append task is gone"))
    }

    /// Sends `batch` as one [`APPEND_GATHERED`] and answers each append it inserted. What it
    /// left out, and everything when the server refused the statement (a session deleted
    /// behind the daemon's back fails the foreign key of the whole statement; a value it
    /// cannot store), is sent again alone by [`Database::append_alone`], which answers with
    /// that append's own result or error. `in_flight` is released before the lone statements,
    /// which may wait for a lock. A failure that leaves unknown whether the statement
    /// committed (the connection lost) is every append's error: a retry could write one twice.
    ///
    /// An append gathered alone is sent as [`APPEND_ENTRY`] at once, which waits for the lock:
    /// where appends do not overlap, and where two daemons append to one session (whose every
    /// other append is a lost race), a left-out try would cost a second round trip for
    /// nothing. Its slot is released after [`ALONE_HOLDS_SLOT`] at most, so a lock another
    /// daemon holds keeps no other session waiting longer.
    async fn append_batch(
        self: Arc<Self>,
        mut batch: Vec<Gathered>,
        in_flight: tokio::sync::OwnedSemaphorePermit,
    ) {
        if batch.len() == 1 {
            if let Some(a) = batch.pop() {
                let written = self.append_alone(&a.header_id, a.seq, &a.row);
                tokio::pin!(written);
                let result = tokio::select! {
                    r = &mut written => r,
                    () = tokio::time::sleep(ALONE_HOLDS_SLOT) => {
                        drop(in_flight);
                        written.await
                    }
                };
                a.answer.send(result);
            }
            return;
        }
        let sent = self.insert_gathered(&batch).await;
        drop(in_flight);
        let left: Vec<Gathered> = match sent {
            Ok(inserted) => batch
                .into_iter()
                .zip(inserted)
                .filter_map(|(a, inserted)| {
                    if inserted {
                        a.answer.send(Ok(true));
                        None
                    } else {
                        Some(a)
                    }
                })
                .collect(),
            Err(e) if e.as_db_error().is_some() => batch,
            Err(e) => {
                for a in batch {
                    a.answer.send(Err(unavailable(&e)));
                }
                return;
            }
        };
        let alone = left
            .iter()
            .map(|a| self.append_alone(&a.header_id, a.seq, &a.row));
        let results = futures_util::future::join_all(alone).await;
        for (a, result) in left.into_iter().zip(results) {
            a.answer.send(result);
        }
    }

    /// [`APPEND_GATHERED`] of `batch`: for each append, whether it was inserted.
    async fn insert_gathered(
        self: &Arc<Self>,
        batch: &[Gathered],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        let client = match self.client().await {
            Ok(c) => c,
            // Not the server's refusal: sent alone, each append reports it in its own words.
            Err(_) => return Ok(vec![false; batch.len()]),
        };
        let statement = client.prepare_cached(APPEND_GATHERED).await?;
        let headers: Vec<&str> = batch.iter().map(|a| a.header_id.as_str()).collect();
        let seqs: Vec<i64> = batch.iter().map(|a| a.seq).collect();
        let ids: Vec<Option<&str>> = batch.iter().map(|a| a.row.id.as_deref()).collect();
        let parents: Vec<Option<&str>> = batch.iter().map(|a| a.row.parent_id.as_deref()).collect();
        let kinds: Vec<&str> = batch.iter().map(|a| a.row.kind).collect();
        let lines: Vec<&[u8]> = batch.iter().map(|a| a.row.line.as_slice()).collect();
        let rows = client
            .query(
                &statement,
                &[
                    &headers,
                    &seqs,
                    &ids,
                    &parents,
                    &kinds,
                    &lines,
                    &self.namespace,
                ],
            )
            .await?;
        let mut inserted = vec![false; batch.len()];
        for r in rows {
            let (header, seq): (&str, i64) = (r.get(0), r.get(1));
            if let Some(i) = batch
                .iter()
                .position(|a| a.header_id == header && a.seq == seq)
            {
                inserted[i] = true;
            }
        }
        Ok(inserted)
    }

    /// One append's first try alone ([`APPEND_ENTRY`], which waits for the session's append
    /// lock): whether it was inserted.
    async fn append_alone(
        self: &Arc<Self>,
        header_id: &str,
        seq: i64,
        row: &EntryRow,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(APPEND_ENTRY)
            .await
            .map_err(unavailable)?;
        let namespace: &str = &self.namespace;
        let rows = client
            .query(&statement, &row.params(&namespace, &header_id, &seq))
            .await
            .map_err(|e| insert_error(e, header_id))?;
        Ok(!rows.is_empty())
    }
}

/// Drains the queue of [`Database::append_gathered`] while the database lives: waits for an
/// append, then for a free statement slot (appends that arrive meanwhile join), and sends
/// every queued append (up to [`MAX_GATHERED`]) as one statement.
async fn gather(db: Weak<Database>, mut queue: tokio::sync::mpsc::UnboundedReceiver<Gathered>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(GATHERED_IN_FLIGHT));
    while let Some(first) = queue.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_GATHERED {
            match queue.try_recv() {
                Ok(a) => batch.push(a),
                Err(_) => break,
            }
        }
        let Some(db) = db.upgrade() else {
            return;
        };
        tokio::spawn(db.append_batch(batch, slot));
    }
}

/// What a failed insert of an entry of `header_id` means: its session is gone (the foreign
/// key), a value the database cannot store, or the database unavailable.
fn insert_error(e: tokio_postgres::Error, header_id: &str) -> StoreError {
    match e.code() {
        Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => {
            StoreError::NoSuchStored(header_id.to_owned())
        }
        _ => statement_error(e, "entry"),
    }
}

/// Takes the session's append lock for the rest of the transaction (the exclusive append
/// after a lost race, [`StoredSession::append_locked`]).
const LOCK_APPENDS: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('compactd-append:' || $2 || '/' || $1, 0))";

/// How long after another daemon last appended beside this one (it won a first try, or the
/// lock found its lines) a session's appends go under the append lock at once
/// ([`StoredSession::append`]): races between daemons come in runs (both appending to one
/// session), and in a run every other optimistic try is lost.
const RACING_FOR: Duration = Duration::from_secs(1);

/// Every line of a session after a seq, in order.
const LINES_AFTER: &str = "SELECT seq, line FROM compactd_entries
     WHERE namespace = $3 AND header_id = $1 AND seq > $2 ORDER BY seq";

/// [`INSERT_ENTRY`] of `row` at `seq`, as prepared on the connection it runs on.
async fn insert_entry(
    client: &impl tokio_postgres::GenericClient,
    statement: &tokio_postgres::Statement,
    namespace: &str,
    header_id: &str,
    seq: i64,
    row: &EntryRow,
) -> Result<u64, tokio_postgres::Error> {
    client
        .execute(statement, &row.params(&namespace, &header_id, &seq))
        .await
}

/// Appends to `into` every line after `seq`, each ending in `\n`; returns the last seq.
/// `statement` is [`LINES_AFTER`] as prepared on `client`.
async fn lines_after(
    client: &impl tokio_postgres::GenericClient,
    statement: &tokio_postgres::Statement,
    namespace: &str,
    header_id: &str,
    seq: i64,
    into: &mut Vec<u8>,
) -> Result<i64, StoreError> {
    let rows = client
        .query(statement, &[&header_id, &seq, &namespace])
        .await
        .map_err(unavailable)?;
    let mut head = seq;
    for r in rows {
        head = r.get(0);
        let line: &[u8] = r.get(1);
        into.extend_from_slice(line);
        into.push(b'\n');
    }
    Ok(head)
}

/// Delivers the other daemons' events: a LISTEN connection wakes it, a timer catches up
/// whatever a notification missed, and a lost connection is re-made.
async fn listen(db: Weak<Database>, deliver: Deliver) {
    let mut last: Option<i64> = None;
    loop {
        let Some(strong) = db.upgrade() else { return };
        let (wake_tx, mut wake) = tokio::sync::mpsc::unbounded_channel::<()>();
        let listener = match Database::connect_raw(&strong.config).await {
            Ok((client, mut connection)) => {
                tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(AsyncMessage::Notification(_)) => {
                                let _ = wake_tx.send(());
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                });
                match client.batch_execute("LISTEN compactd_events").await {
                    Ok(()) => Some(client),
                    Err(_) => None,
                }
            }
            Err(_) => None,
        };
        drop(strong);
        let Some(listener) = listener else {
            tokio::time::sleep(CATCH_UP_EVERY).await;
            continue;
        };
        while !listener.is_closed() {
            let Some(strong) = db.upgrade() else { return };
            match catch_up_events(&strong, &mut last).await {
                Ok(events) => events.into_iter().for_each(|e| deliver(e)),
                Err(e) => tracing::debug!(error = %e, "could not read other daemons' events"),
            }
            drop(strong);
            tokio::select! {
                _ = wake.recv() => {}
                _ = tokio::time::sleep(CATCH_UP_EVERY) => {}
            }
        }
    }
}

/// The events other daemons published after `last` (the first call starts from now).
async fn catch_up_events(
    db: &Arc<Database>,
    last: &mut Option<i64>,
) -> Result<Vec<RemoteEvent>, StoreError> {
    let client = db.client().await?;
    let Some(after) = *last else {
        let max: i64 = client
            .query_one("SELECT coalesce(max(id), 0) FROM compactd_events", &[])
            .await
            .map_err(unavailable)?
            .get(0);
        *last = Some(max);
        return Ok(Vec::new());
    };
    let rows = client
        .query(
            "SELECT id, header_id, name, payload FROM compactd_events
             WHERE id > $1 AND origin <> $2 AND namespace = $3 ORDER BY id",
            &[&after, &db.origin, &db.namespace],
        )
        .await
        .map_err(unavailable)?;
    let mut out = Vec::new();
    for r in rows {
        let id: i64 = r.get(0);
        *last = Some(id);
        let name: String = r.get(2);
        let payload: String = r.get(3);
        let header_id: String = r.get(1);
        if let Ok(payload) = serde_json::from_str(&payload) {
            out.push(RemoteEvent {
                location: self::name(&header_id),
                name,
                payload,
            });
        }
    }
    Ok(out)
}

/// A connection of its own for the appends after a lost race (a transaction holding the
/// session's append lock, [`StoredSession::append_locked`]), with the statements that path
/// runs prepared on it once: under the lock, every round trip is one the other daemons wait
/// for.
struct Spare {
    client: Client,
    lock: tokio_postgres::Statement,
    lines: tokio_postgres::Statement,
    append_or_read: tokio_postgres::Statement,
}

impl Spare {
    /// An idle spare connection of `db`, else a new one (on the database's runtime).
    async fn take(db: &Database) -> Result<Spare, StoreError> {
        let kept = {
            let mut spare = db.spare.lock();
            spare.retain(|s| !s.client.is_closed());
            spare.pop()
        };
        if let Some(s) = kept {
            return Ok(s);
        }
        let (client, connection) = Database::connect_raw(&db.config).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let (lock, lines, append_or_read) = tokio::try_join!(
            client.prepare(LOCK_APPENDS),
            client.prepare(LINES_AFTER),
            client.prepare(APPEND_OR_READ),
        )
        .map_err(unavailable)?;
        Ok(Spare {
            client,
            lock,
            lines,
            append_or_read,
        })
    }
}

/// A session in the database, as one daemon sees it: the last seq it has read or written.
#[derive(Debug)]
pub struct StoredSession {
    db: Arc<Database>,
    header_id: String,
    location: SessionRef,
    /// The seq of the last entry this daemon has (0: none yet).
    head: i64,
    /// False until the session row exists (a new session before its first write).
    exists: bool,
    /// When another daemon was last seen appending to this session: it won a try, or the
    /// append lock found its lines ([`StoredSession::racing`]).
    raced_at: Option<Instant>,
}

impl StoredSession {
    /// A session not in the database yet (written by [`SessionStorage::create`]).
    pub fn new(db: Arc<Database>, header_id: &str) -> StoredSession {
        StoredSession {
            db,
            header_id: header_id.to_owned(),
            location: name(header_id),
            head: 0,
            exists: false,
            raced_at: None,
        }
    }

    /// A connection of the pool for the next statement.
    fn client_for(&self) -> impl Future<Output = Result<Pooled, StoreError>> + Send + 'static {
        let db = self.db.clone();
        async move { db.client().await }
    }

    /// The stored session `header_id` as read (`stored`): its tree and the storage that
    /// follows it.
    fn open(
        db: Arc<Database>,
        header_id: &str,
        stored: Stored,
    ) -> Result<(SessionTree, StoredSession), StoreError> {
        let (tree, head) = stored.into_tree(header_id)?;
        Ok((
            tree,
            StoredSession {
                head,
                exists: true,
                ..StoredSession::new(db, header_id)
            },
        ))
    }
}

impl SessionStorage for StoredSession {
    fn location(&self) -> &SessionRef {
        &self.location
    }

    fn catch_up(&mut self, into: &mut Vec<u8>) -> Result<(), StoreError> {
        if !self.exists {
            return Ok(());
        }
        let client = self.client_for();
        let header_id = self.header_id.clone();
        let namespace = self.db.namespace.clone();
        let head = self.head;
        let (lines, new_head) = self.db.block_on(async move {
            let client = client.await?;
            let statement = client
                .prepare_cached(LINES_AFTER)
                .await
                .map_err(unavailable)?;
            let mut lines = Vec::new();
            let new_head = lines_after(
                &**client, &statement, &namespace, &header_id, head, &mut lines,
            )
            .await?;
            Ok::<_, StoreError>((lines, new_head))
        })?;
        into.extend_from_slice(&lines);
        self.head = new_head;
        Ok(())
    }

    /// The insert checks the head itself: nothing to read first.
    fn before_write(&mut self, _into: &mut Vec<u8>) -> Result<(), StoreError> {
        Ok(())
    }

    /// The optimistic insert; on a lost race, the winner's lines are read, `rebase` re-parents
    /// the entry, and it is tried once more; lost twice, it is appended under the session's
    /// append lock, where it cannot be lost. While another daemon appends to the session
    /// ([`StoredSession::racing`]), every append goes under the lock at once: two round trips
    /// that read what the other daemon wrote, instead of optimistic tries of which every other
    /// one is lost (a try, a read, a retry, and often the lock after all).
    fn append(
        &mut self,
        entry: &Entry,
        rebase: &mut Rebase<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        if self.racing() {
            return self.append_locked(Vec::new(), entry.kind, rebase).map(Some);
        }
        if self.insert(entry, true)? == Insert::Done {
            return Ok(None);
        }
        self.append_after_lost(entry, rebase)
    }

    /// Another daemon appended since this one last read: its lines are read in and the entry
    /// tried once more at the new head; lost again, it is appended under the session's append
    /// lock ([`StoredSession::append_locked`]).
    fn append_after_lost(
        &mut self,
        _entry: &Entry,
        rebase: &mut Rebase<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        self.raced_at = Some(Instant::now());
        let mut lines = Vec::new();
        self.catch_up(&mut lines)?;
        self.retry_after(lines, rebase).map(Some)
    }

    /// The first try shares a statement with other sessions' ([`Database::append_gathered`]),
    /// awaited.
    fn first_try(&mut self, entry: &Entry) -> Result<Option<FirstTry>, StoreError> {
        if self.racing() {
            return Ok(None);
        }
        let Some(row) = self.gatherable(entry)? else {
            return Ok(None);
        };
        let seq = self.head + 1;
        let written = self
            .db
            .append_gathered_awaited(self.header_id.clone(), seq, row);
        Ok(Some(Box::pin(
            async move { Ok(written.await?.then_some(seq)) },
        )))
    }

    fn first_try_landed(&mut self, head: i64) {
        self.head = self.head.max(head);
    }

    fn create(&mut self, header: &Value, entries: &[&Entry]) -> Result<(), StoreError> {
        let field = |k: &str| {
            header
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let rows: Vec<EntryRow> = entries
            .iter()
            .map(|e| EntryRow::of(e))
            .collect::<Result<_, _>>()?;
        let n = rows.len() as i64;
        self.db.create(
            self.header_id.clone(),
            field("cwd"),
            crate::json::stringify(header).into_bytes(),
            rows,
        )?;
        self.head = n;
        self.exists = true;
        Ok(())
    }

    fn reload(&mut self) -> Result<SessionTree, StoreError> {
        let (tree, head) = self.db.load(&self.header_id)?;
        self.head = head;
        self.exists = true;
        Ok(tree)
    }
}

impl StoredSession {
    /// Whether another daemon was seen appending to this session within [`RACING_FOR`].
    fn racing(&self) -> bool {
        self.raced_at.is_some_and(|t| t.elapsed() < RACING_FOR)
    }

    /// The entry re-parented after the lines `won` (what another writer appended since this
    /// daemon's head) and tried once more; lost again, appended under the append lock.
    fn retry_after(&mut self, won: Vec<u8>, rebase: &mut Rebase<'_>) -> Result<Entry, StoreError> {
        let rebased = rebase(&won)?;
        match self.insert(&rebased, false)? {
            Insert::Done => Ok(rebased),
            Insert::Lost(won) => self.append_locked(won, rebased.kind, rebase),
        }
    }

    /// The append after a race lost twice, which cannot be lost again: on a connection of its
    /// own, a transaction takes the session's append lock (every other daemon's append waits
    /// for it), the lines after `won` (what the lost try returned) are read, `rebase`
    /// re-parents the entry, and it is inserted and committed. Two round trips under the lock,
    /// each pipelined (`BEGIN`, the lock and the read; the insert and `COMMIT`), on statements
    /// the connection prepared once: the other daemons wait for nothing more. A connection an
    /// error leaves in doubt is dropped (the server then rolls its transaction back).
    fn append_locked(
        &mut self,
        mut won: Vec<u8>,
        kind: EntryKind,
        rebase: &mut Rebase<'_>,
    ) -> Result<Entry, StoreError> {
        // The commit the entry's kind asks for is set with `BEGIN` (re-parenting changes no
        // entry's kind).
        let begin = match Commit::of(self.db.durability, self.db.durability.syncs_entry(kind))
            .set_local()
        {
            Some(set) => format!("BEGIN; {set}"),
            None => "BEGIN".to_owned(),
        };
        let db = self.db.clone();
        let header_id = self.header_id.clone();
        let head = self.head;
        let (spare, new_head) = self.db.block_on(async move {
            let spare = Spare::take(&db).await?;
            let c = &spare.client;
            let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                [&header_id, &db.namespace];
            let (began, locked, read) = tokio::join!(
                c.batch_execute(&begin),
                c.execute(&spare.lock, &lock_params),
                lines_after(c, &spare.lines, &db.namespace, &header_id, head, &mut won),
            );
            began.and(locked).map_err(unavailable)?;
            let new_head = read?;
            Ok::<_, StoreError>((spare, (new_head, won)))
        })?;
        let (new_head, won) = new_head;
        if new_head > self.head {
            // Another daemon still appends to the session.
            self.raced_at = Some(Instant::now());
            self.head = new_head;
        }
        // A refused re-parenting (the leaf moved off the branch) drops the connection, which
        // ends its transaction.
        let rebased = rebase(&won)?;
        let row = EntryRow::of(&rebased)?;
        row.storable()?;
        let db = self.db.clone();
        let header_id = self.header_id.clone();
        let seq = self.head + 1;
        let rows = self.db.block_on(async move {
            let c = &spare.client;
            let header: &str = &header_id;
            let namespace: &str = &db.namespace;
            let params = row.params(&namespace, &header, &seq);
            // A failed insert makes the COMMIT a rollback.
            let (inserted, committed) = tokio::join!(
                c.query(&spare.append_or_read, &params),
                c.batch_execute("COMMIT"),
            );
            committed.map_err(unavailable)?;
            let rows = inserted.map_err(|e| insert_error(e, &header_id))?;
            db.spare.lock().push(spare);
            Ok::<_, StoreError>(rows)
        })?;
        match self.landed(rows, seq, false) {
            Insert::Done => Ok(rebased),
            // Nobody else appends while the lock is held.
            Insert::Lost(_) => Err(StoreError::Conflict(location(&self.header_id))),
        }
    }

    /// The row of `entry`'s first try when it may share a statement with other sessions'
    /// ([`Database::append_gathered`]): in autocommit at the connection's default commit, so
    /// neither in the exclusive transaction nor a write that must wait for the flush.
    fn gatherable(&self, entry: &Entry) -> Result<Option<EntryRow>, StoreError> {
        let commit = Commit::of(
            self.db.durability,
            self.db.durability.syncs_entry(entry.kind),
        );
        if commit.set_local().is_some() {
            return Ok(None);
        }
        let row = EntryRow::of(entry)?;
        row.storable()?;
        Ok(Some(row))
    }

    /// One insert at the head this session knows: the `first` try of an append runs
    /// [`APPEND_ENTRY`] (lost without lines), every retry [`APPEND_OR_READ`].
    fn insert(&mut self, entry: &Entry, first: bool) -> Result<Insert, StoreError> {
        if first {
            if let Some(row) = self.gatherable(entry)? {
                // The common case: shared with other sessions' first tries.
                let seq = self.head + 1;
                if self.db.append_gathered(self.header_id.clone(), seq, row)? {
                    self.head = seq;
                    return Ok(Insert::Done);
                }
                return Ok(Insert::Lost(Vec::new()));
            }
        }
        let client = self.client_for();
        let header_id = self.header_id.clone();
        let namespace = self.db.namespace.clone();
        let seq = self.head + 1;
        let row = EntryRow::of(entry)?;
        row.storable()?;
        let commit = Commit::of(
            self.db.durability,
            self.db.durability.syncs_entry(entry.kind),
        );
        let sql = if first { APPEND_ENTRY } else { APPEND_OR_READ };
        let rows = self.db.block_on(async move {
            let client = client.await?;
            let statement = client.prepare_cached(sql).await.map_err(unavailable)?;
            let header: &str = &header_id;
            let namespace: &str = &namespace;
            insert_on(
                &client,
                &statement,
                commit,
                &row.params(&namespace, &header, &seq),
            )
            .await
            .map_err(|e| insert_error(e, &header_id))
        })?;
        Ok(self.landed(rows, seq, first))
    }

    /// What the insert at `seq` answered: [`APPEND_ENTRY`]'s (`first`: a row when inserted)
    /// or [`APPEND_OR_READ`]'s (whether inserted, else the winner's lines), with the head moved
    /// past what it learned.
    fn landed(&mut self, rows: Vec<tokio_postgres::Row>, seq: i64, first: bool) -> Insert {
        let inserted = if first {
            !rows.is_empty()
        } else {
            rows.first().is_some_and(|r| r.get::<_, bool>(0))
        };
        if inserted {
            self.head = seq;
            return Insert::Done;
        }
        let mut lines = Vec::new();
        for r in rows {
            self.head = self.head.max(r.get(1));
            let line: &[u8] = r.get(2);
            lines.extend_from_slice(line);
            lines.push(b'\n');
        }
        Insert::Lost(lines)
    }
}

/// What an append at the head a session knows came to.
#[derive(Debug, PartialEq, Eq)]
enum Insert {
    Done,
    /// Not inserted: the lines from that seq on as the same statement saw them (none from a
    /// first try, nor when the winner committed while the statement waited: read them again).
    Lost(Vec<u8>),
}

/// [`APPEND_ENTRY`] or [`APPEND_OR_READ`] (`statement`, prepared on `client`) with `params`,
/// committed as `commit` says: on the connection's default in autocommit, else in a
/// transaction of its own that sets the commit first.
async fn insert_on(
    client: &Client,
    statement: &tokio_postgres::Statement,
    commit: Commit,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let Some(set) = commit.set_local() else {
        return client.query(statement, params).await;
    };
    // Pipelined: one round trip as for any append. A failed insert makes the COMMIT a
    // rollback.
    let begin = format!("BEGIN; {set}");
    let (began, rows, committed) = tokio::join!(
        client.batch_execute(&begin),
        client.query(statement, params),
        client.batch_execute("COMMIT"),
    );
    began.and(rows).and_then(|rows| committed.map(|()| rows))
}

/// The header id a stored session's location names.
fn header_id_of(location: &SessionRef) -> Option<&str> {
    location.as_path().to_str()?.strip_prefix(LOCATION_PREFIX)
}

const STORED_NOT_FILES: &str = "this daemon keeps sessions in PostgreSQL ([storage] backend = \"postgres\"): open one by headerId (`compactd import FILE` loads a session file into the store)";

/// The postgres backend (`[storage] backend = "postgres"`): sessions addressed by header id in
/// one database many daemons share.
///
/// Tenants: every daemon belongs to one namespace (`[storage] namespace`, `default` unless set)
/// and sees only its sessions: listing, opening, exporting, events. Header ids are unique per
/// namespace (every key, lock and lease names the namespace), so no answer, an import's
/// included, tells one tenant which ids another holds. Within it, roots set for the
/// daemon (`[storage] allowed_roots`) apply to a stored session's `cwd` as they apply to a
/// file's path: a session is created, imported, opened, exported and listed only for a working
/// directory under them. (Unset, they do not: a stored session's cwd names no file of this
/// machine, and the namespace is the boundary.)
pub struct Postgres {
    db: Arc<Database>,
    roots: Option<super::files::Roots>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// The backend on the database at `url` for the deployment `namespace`, its sessions'
    /// working directories confined to `roots` (nothing connected yet).
    pub fn open(
        url: &str,
        namespace: &str,
        roots: Option<super::files::Roots>,
        durability: Durability,
    ) -> Result<Postgres, String> {
        Database::open(url, namespace, durability).map(|db| Postgres { db, roots })
    }

    /// Refuses a session whose working directory is outside the roots set for the daemon.
    fn check_cwd(&self, cwd: &str) -> Result<(), StoreError> {
        match &self.roots {
            Some(roots) => super::files::check_roots(&roots(), Path::new(cwd), "Session cwd"),
            None => Ok(()),
        }
    }
}

impl Backend for Postgres {
    fn check(&self) -> Result<(), StoreError> {
        self.db.check()
    }

    fn describe(&self) -> String {
        format!("PostgreSQL, namespace {}", self.db.namespace())
    }

    fn health(&self) -> Health {
        match self.check() {
            Ok(()) => Health {
                verdict: Verdict::Ok,
                text: format!(
                    "PostgreSQL reached, schema in place (namespace {})",
                    self.db.namespace()
                ),
                fix: None,
            },
            Err(e) => Health {
                verdict: Verdict::Fail,
                text: format!("PostgreSQL: {e}"),
                fix: Some(format!("check storage.postgres_url (or {}) and that the server accepts this user: psql \"<url>\" -c 'select 1'", super::POSTGRES_URL_ENV)),
            },
        }
    }

    fn locate(&self, address: Address<'_>) -> Result<SessionRef, StoreError> {
        match (address.path, address.header_id) {
            (None, Some(header_id)) => {
                storable("headerId", header_id)?;
                Ok(name(header_id))
            }
            (Some(_), _) => Err(StoreError::Invalid(STORED_NOT_FILES.into())),
            (None, None) => Err(StoreError::Invalid(
                "missing field `headerId` (this daemon keeps sessions in PostgreSQL)".into(),
            )),
        }
    }

    fn open(&self, location: &SessionRef, _cwd: Option<&str>) -> Result<Opened, StoreError> {
        let header_id =
            header_id_of(location).ok_or_else(|| StoreError::NoSuchStored(location.to_text()))?;
        // Read once: its cwd is checked before anything of it is used.
        let stored = self.db.read_all(header_id)?;
        self.check_cwd(&stored.cwd)?;
        let (tree, storage) = StoredSession::open(self.db.clone(), header_id, stored)?;
        Ok(Opened::Loaded {
            storage: Box::new(storage),
            tree,
        })
    }

    fn create(&self, header: &Value, session_dir: Option<&str>) -> Result<NewSession, StoreError> {
        if session_dir.is_some() {
            return Err(StoreError::Invalid(
                "sessionDir is for session files; this daemon keeps sessions in PostgreSQL ([storage] backend = \"postgres\")".into(),
            ));
        }
        let header_id = header.get("id").and_then(Value::as_str).unwrap_or("");
        self.check_cwd(header.get("cwd").and_then(Value::as_str).unwrap_or(""))?;
        Ok(NewSession {
            location: name(header_id),
            storage: Box::new(StoredSession::new(self.db.clone(), header_id)),
            write_now: true,
        })
    }

    fn list(&self, cwd: Option<String>) -> Result<Vec<StoredSummary>, StoreError> {
        if let Some(c) = &cwd {
            storable("cwd", c)?;
        }
        let mut sessions = self.db.list(cwd)?;
        if let Some(roots) = &self.roots {
            let roots = roots();
            sessions.retain(|s| super::files::check_roots(&roots, Path::new(&s.cwd), "").is_ok());
        }
        Ok(sessions)
    }

    fn lease(
        &self,
        location: &SessionRef,
        cancel: tokio_util::sync::CancellationToken,
        unfinished: super::Unfinished,
    ) -> futures_util::future::BoxFuture<'static, Result<Option<super::Lease>, StoreError>> {
        let db = self.db.clone();
        let header_id = header_id_of(location).map(str::to_owned);
        Box::pin(async move {
            let Some(header_id) = header_id else {
                return Ok(None);
            };
            let lease = db.lease(&header_id, cancel, unfinished).await?;
            Ok(lease.map(|mut l| super::Lease {
                orphaned: l.orphaned.take(),
                guard: Box::new(l),
            }))
        })
    }

    fn publish(&self, location: &SessionRef, name: &str, payload: &Value) {
        if let Some(header_id) = header_id_of(location) {
            self.db.publish(header_id, name, payload);
        }
    }

    fn start_events(&self, deliver: Deliver) {
        self.db.start_events(deliver);
    }

    fn export(&self, header_id: &str) -> Result<Vec<u8>, StoreError> {
        storable("headerId", header_id)?;
        let stored = self.db.read_all(header_id)?;
        self.check_cwd(&stored.cwd)?;
        Ok(stored.text)
    }

    fn import(&self, header_line: &[u8], tree: &SessionTree) -> Result<String, StoreError> {
        self.check_cwd(tree.header.get("cwd").and_then(Value::as_str).unwrap_or(""))?;
        self.db.import(header_line, tree)
    }
}

/// The integration tests' real server, for the tests below (its `skip_or_fail` is the one
/// every suite uses: a skip on a developer's machine, a failure under `CI=true`).
#[cfg(test)]
#[path = "../../tests/support/postgres.rs"]
mod test_server;
#[cfg(test)]
use crate::test_fixtures::skip_or_fail;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::EntryKind;

    /// The version named for checks is the one the migrations end by recording.
    #[test]
    fn the_schema_version_is_the_migrations_last() {
        let last = MIGRATIONS
            .rmatch_indices("INSERT INTO compactd_schema (version) VALUES (")
            .next()
            .map(|(at, m)| &MIGRATIONS[at + m.len()..])
            .and_then(|rest| rest.split(')').next())
            .and_then(|v| v.parse::<i64>().ok());
        assert_eq!(last, Some(SCHEMA_VERSION));
    }

    /// Each durability commits exactly what the files backend fsyncs with the flush, and
    /// nothing else: compactions and branch summaries under `compactions`, everything under
    /// `always`, nothing under `flush`; new sessions as new files.
    #[test]
    fn commits_wait_for_the_flush_exactly_where_files_fsync() {
        let flushed = |d: Durability, kind: EntryKind| {
            let commit = Commit::of(d, d.syncs_entry(kind));
            commit != Commit::Unflushed
        };
        for kind in [
            EntryKind::Message,
            EntryKind::Compaction,
            EntryKind::BranchSummary,
        ] {
            assert!(!flushed(Durability::Flush, kind), "{kind:?}");
            assert!(flushed(Durability::Always, kind), "{kind:?}");
            assert_eq!(
                flushed(Durability::Compactions, kind),
                kind != EntryKind::Message,
                "{kind:?}"
            );
        }
        assert_eq!(Commit::of(Durability::Always, true), Commit::ServerDefault);
        assert_eq!(
            Commit::of(Durability::Compactions, true).set_local(),
            Some("SET LOCAL synchronous_commit = on")
        );
        assert_eq!(Commit::of(Durability::Flush, false).set_local(), None);
    }

    use super::test_server as pg;

    type Answered = std::sync::mpsc::Receiver<Result<bool, StoreError>>;

    /// The first try of an append of `header_id` at `seq`, whose line names `id`.
    fn gathered(header_id: &str, seq: i64, id: &str) -> (Gathered, Answered) {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let row = EntryRow {
            id: Some(id.to_owned()),
            parent_id: None,
            kind: "message",
            line: format!("{{\"type\":\"message\",\"id\":\"{id}\"}}").into_bytes(),
        };
        let a = Gathered {
            header_id: header_id.to_owned(),
            seq,
            row,
            answer: Answer::Blocked(answer),
        };
        (a, answered)
    }

    /// Sends `batch` as the gathering task does, without waiting for the answers.
    fn send(db: &Arc<Database>, batch: Vec<Gathered>) {
        let sender = db.clone();
        db.handle().spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(1));
            if let Ok(slot) = slots.acquire_owned().await {
                sender.append_batch(batch, slot).await;
            }
        });
    }

    fn answer(a: &Answered) -> Result<bool, StoreError> {
        a.recv_timeout(Duration::from_secs(20))
            .expect("an answer within 20 s")
    }

    /// What a gathered statement does is what each of its appends would have done alone:
    /// appends of several sessions share one transaction; a seq another writer took is lost;
    /// an append to a session that does not exist is `NoSuchStored` while the others of its
    /// statement land; a session whose append lock another daemon holds waits alone, and the
    /// others of its statement are answered meanwhile. Every session's lines end in order.
    #[test]
    fn a_gathered_statement_answers_each_append_as_if_it_were_sent_alone() {
        let test = "a_gathered_statement_answers_each_append_as_if_it_were_sent_alone";
        let Some(pg) = pg::Postgres::start(test) else {
            return;
        };
        let db = Database::open(&pg.url(), "default", Durability::Flush).expect("the database");
        for h in ["a", "b"] {
            db.create(h.into(), "/w".into(), b"{}".to_vec(), Vec::new())
                .expect("a session");
        }

        let (a1, to_a1) = gathered("a", 1, "a1");
        let (b1, to_b1) = gathered("b", 1, "b1");
        send(&db, vec![a1, b1]);
        assert!(matches!(answer(&to_a1), Ok(true)));
        assert!(matches!(answer(&to_b1), Ok(true)));
        let transactions =
            pg.psql("SELECT count(DISTINCT xmin::text) FROM compactd_entries WHERE seq = 1");
        assert_eq!(transactions, "1", "both rows in one statement");

        let (taken, to_taken) = gathered("a", 1, "late");
        let (gone, to_gone) = gathered("gone", 1, "g1");
        let (b2, to_b2) = gathered("b", 2, "b2");
        send(&db, vec![taken, gone, b2]);
        assert!(matches!(answer(&to_taken), Ok(false)));
        assert!(matches!(answer(&to_gone), Err(StoreError::NoSuchStored(ref h)) if h == "gone"));
        assert!(matches!(answer(&to_b2), Ok(true)));

        let mut holder = pg.session();
        holder.send("SELECT pg_advisory_lock(hashtextextended('compactd-append:default/a', 0));");
        let held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted";
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while pg.psql(held) != "1" {
            assert!(std::time::Instant::now() < deadline, "psql took the lock");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (a2, to_a2) = gathered("a", 2, "a2");
        let (b3, to_b3) = gathered("b", 3, "b3");
        send(&db, vec![a2, b3]);
        assert!(matches!(answer(&to_b3), Ok(true)), "b is not held up by a");
        let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
        while pg.psql(waiting) != "1" {
            assert!(
                std::time::Instant::now() < deadline,
                "a's append waits for the lock"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            to_a2.try_recv().is_err(),
            "a's append waits while the lock is held"
        );
        drop(holder);
        assert!(matches!(answer(&to_a2), Ok(true)));

        let lines = |h: &str| {
            let text = db.read_all(h).expect("the session").text;
            String::from_utf8(text).expect("UTF-8")
        };
        let line = |id: &str| format!("{{\"type\":\"message\",\"id\":\"{id}\"}}\n");
        assert_eq!(lines("a"), format!("{{}}\n{}{}", line("a1"), line("a2")));
        assert_eq!(
            lines("b"),
            format!("{{}}\n{}{}{}", line("b1"), line("b2"), line("b3"))
        );
    }
}
