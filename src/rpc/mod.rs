//! The protocol surface: the one list of methods, their parameter and result types, the event
//! payloads, error codes and the OpenRPC document generated from them. Transport-independent; the handlers live in
//! `crate::daemon`, and `crate::transport::dispatch` builds its table from [`methods`].

pub mod errors;
pub mod events;
pub mod methods;
pub mod openrpc;
pub mod results;
pub mod schemas;
pub mod types;

pub use errors::{ErrorKind, RpcError};

/// Protocol version of this daemon (`initialize`, and the OpenRPC document's `info.version`).
pub const PROTOCOL_VERSION: &str = "1.0";
