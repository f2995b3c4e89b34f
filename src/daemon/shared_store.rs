//! The daemon's side of sessions other daemons may share (a shared store such as PostgreSQL,
//! beyond Pi): the compaction lease every compaction holds, and the events other daemons
//! announced for the sessions this one has open. Both go through the configured
//! [`crate::store::Backend`]; with files there is no lease to wait for and no event arrives.
//!
//! A compaction waits for the lease as it waits for the session's slot, then reads what the
//! other daemons wrote before it plans; an event from another daemon reaches this daemon's
//! subscribers under this daemon's session id, and a compaction another daemon finished is read
//! in at once, so this daemon's reads reflect it.

use std::sync::Arc;

use super::{Daemon, Session};
use crate::rpc::errors::RpcError;
use crate::rpc::events::{self, Event, Message};
use crate::store::{Lease, RemoteEvent, Unfinished};

/// Starts delivering other daemons' events to `daemon`'s subscribers.
pub(super) fn start_events(daemon: &Arc<Daemon>) {
    let weak = Arc::downgrade(daemon);
    daemon.storage.start_events(Arc::new(move |event| {
        if let Some(d) = weak.upgrade() {
            deliver(&d, event);
        }
    }));
}

/// Hands one event another daemon announced to the subscribers of the session here.
fn deliver(daemon: &Arc<Daemon>, mut event: RemoteEvent) {
    let Some(session) = daemon.open_at(&event.location) else {
        return;
    };
    if let Some(o) = event.payload.as_object_mut() {
        o.insert("sessionId".into(), session.id.clone().into());
    }
    daemon.emit_raw(&session.id, Some(&session), &event.name, &event.payload);
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

/// Takes the compaction lease of the session (nothing where no other daemon can write it),
/// waiting while another daemon compacts it, then reads in what the other daemons wrote
/// meanwhile, so the compaction plans from the session as it is now. The caller holds the
/// session's slot.
///
/// A compaction another daemon started and never ended (it died holding the lease) is ended
/// here, `aborted` with the reason, before anything else happens: its subscribers, on every
/// daemon, saw its `compaction_start`.
pub async fn lease(daemon: &Daemon, session: &Session) -> Result<Option<Lease>, RpcError> {
    let unfinished = Unfinished {
        start: events::CompactionStart::NAME,
        end: events::CompactionEnd::NAME,
    };
    let mut lease = daemon
        .storage
        .lease(&session.location, daemon.shutdown.child_token(), unfinished)
        .await
        .map_err(super::session::store_error)?;
    if let Some(start) = lease.as_mut().and_then(|l| l.orphaned.take()) {
        let reason = match Event::parse(events::CompactionStart::NAME, &start) {
            Ok(Event::CompactionStart(s)) => s.reason,
            _ => events::Reason::Manual,
        };
        tracing::warn!(session = %session.id, "ending the compaction of a daemon that died mid-compaction");
        daemon.emit(
            &session.id,
            &events::CompactionEnd {
                session_id: &session.id,
                reason,
                result: None,
                aborted: true,
                will_retry: false,
                error_message: Some(ORPHANED),
            },
        );
    }
    if lease.is_some() {
        session.lock_state().sync_with_file()?;
    }
    Ok(lease)
}

/// Why a compaction another daemon started ended without a result.
const ORPHANED: &str =
    "Compaction aborted: the daemon running it stopped before it finished; another daemon took its lease over";
