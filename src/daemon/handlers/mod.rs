//! One handler per protocol method, grouped by area, independent of any transport: each takes the
//! caller's [`Ctx`] and its typed params and returns its typed result or an [`RpcError`]. The
//! dispatch table (`crate::transport::dispatch`) calls them as the method list
//! (`crate::rpc::methods`) declares. The handlers of the beyond-Pi lanes live beside their
//! concepts (`super::history`, `super::pins`, `super::undo`), tree navigation in
//! `super::navigate`.
//!
//! [`RpcError`]: crate::rpc::RpcError

use std::sync::Arc;

use super::connections::Connection;
use super::Daemon;

pub mod compaction;
pub mod entries;
pub mod registrations;
pub mod sessions;

/// The caller of a method.
#[derive(Clone)]
pub struct Ctx {
    pub daemon: Arc<Daemon>,
    pub conn: Arc<Connection>,
}
