//! The MCP recall tools' arguments, any bytes as a client (or a model) may send them: decoding
//! never panics, a `limit` decodes only to a whole number (sent as a number or as its digits),
//! and whatever an argument holds, the text the tools echo of it is bounded.
#![no_main]

use compactd::mcp::{bounded, EntryArgs, SearchArgs, MAX_ERROR_CHARS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(args) = serde_json::from_slice::<SearchArgs>(data) {
        let value: serde_json::Value = serde_json::from_slice(data).expect("it decoded");
        // MCP sends arguments as an object (serde also reads a struct from an array, which
        // no MCP client sends: the tools never see one).
        let limit = match &value {
            serde_json::Value::Object(o) => o.get("limit").unwrap_or(&serde_json::Value::Null),
            _ => return,
        };
        match limit {
            serde_json::Value::Null => assert_eq!(args.limit, None),
            serde_json::Value::String(s) => assert_eq!(args.limit, s.trim().parse().ok()),
            n => assert_eq!(args.limit.map(u64::from), n.as_u64()),
        }
        let (cut, _) = bounded(&args.query, MAX_ERROR_CHARS);
        assert!(cut.chars().count() <= MAX_ERROR_CHARS);
    }
    if let Ok(args) = serde_json::from_slice::<EntryArgs>(data) {
        let (cut, truncated) = bounded(&args.entry_id, 64);
        assert!(cut.chars().count() <= 64);
        assert_eq!(truncated, args.entry_id.chars().count() > 64);
    }
});
