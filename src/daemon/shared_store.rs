//! The daemon's side of a shared session store (`[storage] backend = "postgres"`, beyond Pi):
//! opening the database, the compaction lease every compaction of a stored session holds, and
//! the events other daemons announced for the sessions this one has open.
//!
//! The storage itself (lines, heads, conflicts) is `store::postgres`; this module only decides
//! what the daemon does with it: a compaction waits for the lease as it waits for the session's
//! slot, then reads what the other daemons wrote before it plans; an event from another daemon
//! reaches this daemon's subscribers under this daemon's session id, and a compaction another
//! daemon finished is read in at once, so this daemon's reads reflect it.

use std::sync::Arc;

use super::{Daemon, Session};
use crate::rpc::errors::RpcError;
use crate::store::postgres::{self, Database, Lease, RemoteEvent};

/// Opens the configured database, if the backend is `postgres`; an error when it cannot even
/// be set up (the URL was checked when the configuration loaded).
pub(super) fn open(config: &crate::config::Config) -> Result<Option<Arc<Database>>, String> {
    match config.storage.postgres_url() {
        Some(url) => Database::open(&url).map(Some),
        None => Ok(None),
    }
}

/// Starts delivering other daemons' events to `daemon`'s subscribers.
pub(super) fn start_events(daemon: &Arc<Daemon>) {
    let Some(db) = &daemon.database else {
        return;
    };
    let weak = Arc::downgrade(daemon);
    db.start_events(Arc::new(move |event| {
        if let Some(d) = weak.upgrade() {
            deliver(&d, event);
        }
    }));
}

/// Hands one event another daemon announced to the subscribers of the session here.
fn deliver(daemon: &Arc<Daemon>, mut event: RemoteEvent) {
    let Some(session) = daemon.open_at(&postgres::location(&event.header_id)) else {
        return;
    };
    if let Some(o) = event.payload.as_object_mut() {
        o.insert("sessionId".into(), session.id.clone().into());
    }
    daemon.emit_raw(&session.id, &event.name, &event.payload);
    if event.name == crate::rpc::events::EventKind::CompactionEnd.name() {
        // The other daemon's entry is in the store: read it in now, so this daemon's reads
        // (context, usage, branch) reflect it without waiting for its next write.
        let session = session.clone();
        std::thread::spawn(move || {
            if let Err(e) = session.lock_state().sync_with_file() {
                tracing::warn!(session = %session.id, error = %e.message, "could not read another daemon's compaction");
            }
        });
    }
}

/// The header id of a stored session (`None` for a file session).
pub fn header_id(session: &Session) -> Option<&str> {
    session
        .path
        .to_str()
        .and_then(|p| p.strip_prefix(postgres::LOCATION_PREFIX))
}

/// Takes the compaction lease of a stored session (nothing for a file session), waiting while
/// another daemon compacts it, then reads in what the other daemons wrote meanwhile, so the
/// compaction plans from the session as it is now. The caller holds the session's slot.
pub async fn lease(daemon: &Daemon, session: &Session) -> Result<Option<Lease>, RpcError> {
    let (Some(db), Some(header_id)) = (&daemon.database, header_id(session)) else {
        return Ok(None);
    };
    let lease = db
        .lease(header_id, daemon.shutdown.child_token())
        .await
        .map_err(super::session::store_error)?;
    session.lock_state().sync_with_file()?;
    Ok(lease)
}
