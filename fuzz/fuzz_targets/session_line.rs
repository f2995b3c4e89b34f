//! One session line, any bytes: the facts compactd reads from the line's bytes without a value
//! tree (`Entry::from_line`, the load path) must be the facts it reads from the parsed
//! `serde_json::Value` (`parse_line_bytes` then `Entry::from_value`, the path of migrated and
//! compactd-built entries): type, ids, role, token estimate, usage, stop reason, file
//! operations. A line one path reads and the other refuses is a failure too. Neither may panic.
#![no_main]

use bytes::Bytes;
use compactd::session::entry::parse_line_bytes;
use compactd::session::Entry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fast = Entry::from_line(Bytes::copy_from_slice(data));
    let slow = parse_line_bytes(data).map(|r| r.map(Entry::from_value));
    match (fast, slow) {
        (None, None) => {}
        (Some(Err(())), Some(Err(()))) => {}
        (Some(Ok(a)), Some(Ok(b))) => {
            assert_eq!(a.kind, b.kind, "kind");
            assert_eq!(a.id, b.id, "id");
            assert_eq!(a.parent_id, b.parent_id, "parentId");
            assert_eq!(a.role, b.role, "role");
            assert_eq!(a.tokens, b.tokens, "tokens");
            assert_eq!(
                a.usage_tokens.map(f64::to_bits),
                b.usage_tokens.map(f64::to_bits),
                "usage"
            );
            assert_eq!(a.stop_reason, b.stop_reason, "stopReason");
            assert_eq!(a.file_ops, b.file_ops, "file ops");
        }
        (fast, slow) => panic!(
            "the paths disagree on whether the line reads: bytes {:?} / value {:?}",
            fast.map(|r| r.is_ok()),
            slow.map(|r| r.is_ok())
        ),
    }
});
