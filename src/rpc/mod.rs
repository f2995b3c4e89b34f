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
pub mod wire;

pub use errors::{ErrorKind, RpcError};

/// Protocol version of this daemon (`initialize`, and the OpenRPC document's `info.version`).
pub const PROTOCOL_VERSION: &str = "1.0";

/// Longest client-controlled string a log line carries, in bytes (see [`for_log`]).
pub const LOG_STRING_LIMIT: usize = 200;

/// A client-controlled string (a method name, an id, a client name, an error message that
/// quotes params) as a log line carries it: at most [`LOG_STRING_LIMIT`] bytes, cut on a char
/// boundary and marked with the full length, so a client cannot write megabytes into the log
/// with one unknown method name.
pub fn for_log(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= LOG_STRING_LIMIT {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut end = LOG_STRING_LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}… ({} bytes)", &s[..end], s.len()))
}
