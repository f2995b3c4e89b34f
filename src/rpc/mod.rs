//! The protocol surface: parameter/result types and error codes. Transport-independent; the
//! handlers live in `crate::daemon`, and `crate::transport::dispatch` maps names to them.

pub mod errors;
pub mod openrpc;
pub mod types;

pub use errors::{ErrorKind, RpcError};
