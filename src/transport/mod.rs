//! Transports: bytes in, JSON-RPC messages out. Framing (`framing`), the per-connection loop
//! (`connection`), the method table (`dispatch`, the only jsonrpsee-touching module), and the two
//! listeners: a Unix socket for many clients (`unix`) and stdin/stdout for one (`stdio`).

pub mod connection;
pub mod dispatch;
pub mod framing;
pub mod stdio;
pub mod unix;

pub use framing::{Framing, DEFAULT_MAX_FRAME};
