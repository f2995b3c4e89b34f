//! Any bytes as a session file: reading, migrating, indexing the tree, projecting the branch to
//! model context and the whole `inspect` analysis must never panic, whatever the file holds.
#![no_main]

use compactd::compaction::tokens::CompactionSettings;
use compactd::context::{build_session_context, context_entries};
use compactd::session::{read_session, ReadOutcome, SessionTree};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ReadOutcome::Session(parsed) = read_session(data) else {
        return;
    };
    let tree = SessionTree::from_parsed(parsed);
    let branch = tree.branch();
    let path = tree.refs(&branch);
    let _ = context_entries(&path);
    let _ = build_session_context(&path);
    let _ = compactd::report::inspect(&tree, 200_000, &CompactionSettings::default());
});
