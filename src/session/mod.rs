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

pub use crate::pi_version::PiVersion;
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

/// What in `entries` only Pi 1.6 (0.86 and later) writes, named for a warning: a `context_edit`
/// or `usage` entry, a system-role message, or a compaction carrying `systemMessage` or keeping
/// nothing (its `firstKeptEntryId` its own id). `None` when the entries read the same under
/// both versions' formats.
pub fn signs_of_1_6<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Option<&'static str> {
    entries.into_iter().find_map(|e| match e.kind {
        EntryKind::ContextEdit => Some("a context_edit entry"),
        EntryKind::Usage => Some("a usage entry"),
        EntryKind::Message if e.role == Some(Role::System) => Some("a system-role message"),
        EntryKind::Compaction if e.get("systemMessage").is_some() => {
            Some("a compaction with systemMessage")
        }
        EntryKind::Compaction
            if e.id.is_some() && e.str_field("firstKeptEntryId") == e.id.as_deref() =>
        {
            Some("a compaction that keeps nothing")
        }
        _ => None,
    })
}

/// The warning for a session read under Pi 0.85's rules that shows `sign` of Pi 1.6.
pub fn misread_message(sign: &str) -> String {
    format!(
        "this session was written by Pi 1.6 (it has {sign}) but is read under Pi 0.85's rules; set piVersion to \"1.6\" (setSettingsOverrides, [compat] pi_version in the config, or --pi-version 1.6)"
    )
}
