//! A session's state behind its writers' gate.
//!
//! Two locks, taken in this order: the **gate** (async, one writer of the session at a time)
//! and the **state** (a short synchronous lock over [`SessionState`]). Every writer passes the
//! gate, so a session's appends stay serialized as Pi's single writer expects; but an append
//! whose write travels (the database) lets go of the state while it awaits the server and keeps
//! only the gate. So no synchronous lock is held across awaited I/O: a writer waiting its turn
//! awaits the gate without holding a thread, and a reader ([`SessionLock::read`]:
//! `shouldCompact`, `getContextUsage`) is answered from the state as it stood before the append,
//! which has not been acknowledged yet, instead of waiting for the server's answer.
//!
//! A writer that writes synchronously (a file's `write`, a compaction's entry) holds both for
//! the whole of its write, as before; readers wait for it the few microseconds a file append
//! takes.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use serde_json::Value;

use super::session::{Begun, SessionState};
use crate::rpc::errors::RpcError;

/// How long a caller on an async worker waits for the state lock before handing the worker's
/// other tasks on: requests hold it for microseconds, synchronous storage writes for longer.
const SHORT_LOCK_WAIT: Duration = Duration::from_micros(200);

/// The session's state and the gate its writers pass.
pub struct SessionLock {
    gate: tokio::sync::Mutex<()>,
    state: Mutex<SessionState>,
}

/// A writer's hold on the session: its turn at the gate and the state (let go of in this
/// order of fields: the state first, then the turn).
pub struct StateGuard<'a> {
    state: MutexGuard<'a, SessionState>,
    turn: Turn<'a>,
}

/// A writer's turn at the gate without the state: what an append keeps while its write
/// travels. [`Turn::relock`] takes the state back.
struct Turn<'a> {
    lock: &'a SessionLock,
    _gate: tokio::sync::MutexGuard<'a, ()>,
}

impl SessionLock {
    pub fn new(state: SessionState) -> SessionLock {
        SessionLock {
            gate: tokio::sync::Mutex::new(()),
            state: Mutex::new(state),
        }
    }

    /// The gate and the state, for a caller that cannot await (a synchronous handler, the
    /// lifecycle's threads). Waiting on either lets the async worker hand its other tasks on
    /// ([`crate::cpu::blocking`]), so no worker is stuck on a session another request writes.
    pub fn lock(&self) -> StateGuard<'_> {
        let gate = match self.gate.try_lock() {
            Ok(g) => g,
            // Outside a runtime, and inside `block_in_place` on the daemon's multi-threaded
            // one, a thread may block on the gate (no session lives on a current-thread
            // runtime: the CLI's client shape opens none).
            Err(_) => crate::cpu::blocking(|| self.gate.blocking_lock()),
        };
        Turn {
            lock: self,
            _gate: gate,
        }
        .relock()
    }

    /// [`SessionLock::lock`] for a caller that awaits its turn at the gate without holding a
    /// thread.
    pub async fn lock_async(&self) -> StateGuard<'_> {
        Turn {
            lock: self,
            _gate: self.gate.lock().await,
        }
        .relock()
    }

    /// The state alone, for a caller that only reads it: it does not wait for a write that is
    /// travelling (see the module's documentation), and it cannot write (the guard gives no
    /// `&mut`), so it cannot slip between a writer's two halves.
    pub fn read(&self) -> ReadGuard<'_> {
        ReadGuard(self.state_only())
    }

    /// The state lock: a short wait just waits (handing the worker's tasks to another thread
    /// costs more than it saves), a longer one lets the worker's other tasks move on.
    fn state_only(&self) -> MutexGuard<'_, SessionState> {
        if let Some(guard) = self.state.try_lock() {
            return guard;
        }
        match self.state.try_lock_for(SHORT_LOCK_WAIT) {
            Some(guard) => guard,
            None => crate::cpu::blocking(|| self.state.lock()),
        }
    }
}

impl<'a> StateGuard<'a> {
    /// Lets go of the state and keeps the turn at the gate, across a write that travels.
    fn release(self) -> Turn<'a> {
        self.turn
    }

    /// Appends the entry `build` makes ([`SessionState::append_as`]'s arguments), awaiting a
    /// write that travels with the state let go and the turn kept; the guard comes back with
    /// the result. The rest of the append (after another writer won the first try, or a
    /// storage that writes at once) is [`SessionState::append_as`]'s own.
    pub async fn append_awaiting(
        mut self,
        chosen: Option<&str>,
        build: impl FnOnce(&str, Option<&str>, &str) -> Value,
    ) -> (StateGuard<'a>, Result<usize, RpcError>) {
        let travelling = match self.begin_append(chosen, build) {
            Ok(Begun::Written(idx)) => return (self, Ok(idx)),
            Ok(Begun::Travelling(t)) => t,
            Err(e) => return (self, Err(e)),
        };
        let turn = self.release();
        let landed = travelling.first.await;
        let mut state = turn.relock();
        let idx = state.land_append(travelling.entry, travelling.parent.as_deref(), landed);
        (state, idx)
    }
}

impl<'a> Turn<'a> {
    /// Takes the state back (readers hold it for microseconds only, and no other writer can
    /// hold it: they wait at the gate).
    fn relock(self) -> StateGuard<'a> {
        let state = self.lock.state_only();
        StateGuard { state, turn: self }
    }
}

impl Deref for StateGuard<'_> {
    type Target = SessionState;
    fn deref(&self) -> &SessionState {
        &self.state
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }
}

/// A reader's hold on the state: shared access only.
pub struct ReadGuard<'a>(MutexGuard<'a, SessionState>);

impl Deref for ReadGuard<'_> {
    type Target = SessionState;
    fn deref(&self) -> &SessionState {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::session::test_storage::{NoFile, Travel};
    use std::sync::Arc;
    use std::time::Duration;

    fn user(id: &str, parent: Option<&str>, ts: &str) -> Value {
        crate::daemon::session::message_entry(
            id,
            parent,
            ts,
            serde_json::json!({"role": "user", "content": "hi", "timestamp": 1}),
        )
    }

    /// While an append's write travels, the session's readers are answered from the state as
    /// it was, and its other writers (async and blocking alike) wait for their turn; once it
    /// lands they see it.
    #[test]
    fn a_travelling_append_keeps_its_turn_but_not_the_state() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let left = Arc::new(tokio::sync::Notify::new());
        let (land, landing) = tokio::sync::oneshot::channel();
        let lock = Arc::new(SessionLock::new(SessionState::persisted_for_tests(
            Box::new(NoFile::travelling(Travel {
                left: left.clone(),
                land: landing,
            })),
        )));
        runtime.block_on(async {
            let first = tokio::spawn({
                let lock = lock.clone();
                async move {
                    let (state, idx) = lock.lock_async().await.append_awaiting(None, user).await;
                    (idx.is_ok(), state.tree.len())
                }
            });
            left.notified().await;
            // A reader is answered at once, from the state before the append.
            let read = tokio::time::timeout(
                Duration::from_secs(10),
                tokio::task::spawn_blocking({
                    let lock = lock.clone();
                    move || lock.read().tree.len()
                }),
            )
            .await
            .expect("the reader is not held up")
            .expect("the reader");
            assert_eq!(read, 0, "the travelling entry is not in the state yet");
            // Writers wait for the turn: one awaiting, one blocking a thread.
            let second = tokio::spawn({
                let lock = lock.clone();
                async move { lock.lock_async().await.tree.len() }
            });
            let blocking = tokio::task::spawn_blocking({
                let lock = lock.clone();
                move || lock.lock().tree.len()
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!first.is_finished(), "the first append travels");
            assert!(!second.is_finished(), "an async writer waits for its turn");
            assert!(
                !blocking.is_finished(),
                "a blocking writer waits for its turn"
            );
            land.send(()).expect("the append waits to land");
            assert_eq!(first.await.expect("the first append"), (true, 1));
            assert_eq!(
                second.await.expect("the async writer"),
                1,
                "it sees the append"
            );
            assert_eq!(blocking.await.expect("the blocking writer"), 1);
        });
    }
}
