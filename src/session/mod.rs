//! Pi session files in memory: entries, reading and migration, the tree, ids and timestamps.
//!
//! Everything here is pure; `crate::store` is the shell that touches the disk. `room`: how the
//! vectors an open session keeps one slot per entry in grow.

pub mod entry;
pub mod facts;
pub mod ids;
pub mod reader;
pub mod room;
pub mod tree;
pub mod vocab;

pub use entry::{Entry, EntryId, EntryKind, LineGone, LineSource, Role, StopReason};
pub use reader::{read_session, read_session_bytes, ParsedSession, ReadOutcome};
pub use tree::{BranchView, PathEntries, SessionTree};

/// A new session's header line as Pi writes it (version 3, a fresh id, now, `cwd`).
pub fn new_header(cwd: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "session",
        "version": 3,
        "id": ids::new_session_id(),
        "timestamp": ids::iso_timestamp(ids::now_ms()),
        "cwd": cwd,
    })
}

/// The name Pi gives the directory of `cwd`'s sessions under its session directory
/// (`--<cwd with separators as dashes>--`): where new session files go by default, and where a
/// client looks for a working directory's newest session.
pub fn dir_name_of_cwd(cwd: &str) -> String {
    let trimmed = cwd.strip_prefix(['/', '\\']).unwrap_or(cwd);
    format!("--{}--", trimmed.replace(['/', '\\', ':'], "-"))
}
