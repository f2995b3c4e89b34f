//! Transports: bytes in, JSON-RPC messages out. Framing (`framing`), typed wire messages
//! (`message`), the per-connection loop (`connection`), the method table (`dispatch`), the
//! two listeners: a Unix socket for many clients (`unix`) and stdin/stdout for one (`stdio`),
//! and the other side of the socket: the byte pump of `compactd connect` (`bridge`) and a small
//! request/response client of the daemon (`client`).

pub mod bridge;
pub mod client;
pub mod connection;
pub mod dispatch;
pub mod framing;
pub mod message;
pub mod stdio;
pub mod unix;

pub use framing::{
    FrameBudget, Framing, DEFAULT_FRAME_DEADLINE, DEFAULT_FRAME_IDLE_TIMEOUT, DEFAULT_MAX_BUFFERED,
    DEFAULT_MAX_FRAME,
};

/// Default number of slow requests (compact, checkCompaction, navigateTree) one connection may
/// have running at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Default bytes of replies and events a connection may leave unread before the daemon stops
/// reading its requests: 8 MiB (a client that never reads grows the daemon by about this much
/// plus one reply).
pub const DEFAULT_MAX_QUEUED: usize = 8 * 1024 * 1024;
/// Default bytes of unread replies and events over all connections together before every
/// connection with replies still queued stops being read until it drains: 64 MiB (the
/// per-connection limit alone allowed 256 connections × the limit).
pub const DEFAULT_MAX_QUEUED_TOTAL: usize = 64 * 1024 * 1024;
/// Default number of simultaneous socket connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Per-connection settings and limits, shared by both listeners.
#[derive(Debug, Clone)]
pub struct Options {
    /// Forced framing; `None` detects it per connection.
    pub framing: Option<Framing>,
    /// Largest accepted frame in bytes.
    pub max_frame: usize,
    /// Slow requests one connection may have running.
    pub max_in_flight: usize,
    /// Unread reply bytes past which a connection's input is paused.
    pub max_queued: usize,
    /// Unread reply bytes over all connections past which every connection with unread
    /// replies is paused until its own queue is empty.
    pub max_queued_total: usize,
    /// Frame bytes all connections together may be assembling.
    pub budget: FrameBudget,
    /// Longest wait for the next byte of a started frame before the connection is closed
    /// (`None`: no limit).
    pub frame_idle_timeout: Option<std::time::Duration>,
    /// Longest time one frame may take from its first byte to its last before the connection
    /// is closed (`None`: no limit).
    pub frame_deadline: Option<std::time::Duration>,
    /// The socket connection's slot: where its frame progress is reported and how the
    /// listener closes it to make room (`None` for stdio and by default).
    pub slot: Option<std::sync::Arc<Slot>>,
}

/// One socket connection's place among `--max-connections`. When every slot is taken, the
/// listener closes the connection whose partial request is oldest (`evict`) so a new client is
/// served within a bounded time, instead of refusing it until that request times out.
#[derive(Debug, Default)]
pub struct Slot {
    pub progress: std::sync::Arc<framing::FrameProgress>,
    pub evict: tokio_util::sync::CancellationToken,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            framing: None,
            max_frame: DEFAULT_MAX_FRAME,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_queued: DEFAULT_MAX_QUEUED,
            max_queued_total: DEFAULT_MAX_QUEUED_TOTAL,
            budget: FrameBudget::new(DEFAULT_MAX_BUFFERED),
            frame_idle_timeout: Some(DEFAULT_FRAME_IDLE_TIMEOUT),
            frame_deadline: Some(DEFAULT_FRAME_DEADLINE),
            slot: None,
        }
    }
}
