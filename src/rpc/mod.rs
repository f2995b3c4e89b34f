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

/// A client-controlled string as it may appear in a log line: at most `max` characters, with
/// `…` when cut, so a client cannot fill the log with one field.
pub fn truncated(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}
