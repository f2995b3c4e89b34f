//! Small Pi session files (a header and two user/assistant turns, about 1.5 KB each), many of
//! which one daemon holds open: shared by `tests/descriptors.rs` and, through `#[path]`, by
//! `benches/sessions.rs`, so the suite and the bench measure the same sessions.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Session `i`'s file text: header id `s{i:05}`, four messages chained under it.
pub fn small_session(i: usize) -> String {
    let usage = json!({"input": 1200, "output": 40, "cacheRead": 0, "cacheWrite": 0,
        "totalTokens": 1240, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}});
    let mut text = json!({"type": "session", "version": 3, "id": format!("s{i:05}"),
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"})
    .to_string();
    text.push('\n');
    let mut parent = Value::Null;
    for k in 0..4 {
        let id = format!("{i:05}{k:03}");
        let message = if k % 2 == 0 {
            json!({"role": "user", "content": format!("turn {k}: rename the config loader and add tests for it"), "timestamp": 1})
        } else {
            json!({"role": "assistant", "content": [{"type": "text", "text": "Renamed load_config to Config::load; tests added in tests/config.rs."}],
                "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
                "usage": usage, "stopReason": "stop", "timestamp": 2})
        };
        text.push_str(
            &json!({"type": "message", "id": id, "parentId": parent,
                "timestamp": "2026-01-01T00:00:01.000Z", "message": message})
            .to_string(),
        );
        text.push('\n');
        parent = Value::String(id);
    }
    text
}

/// Writes sessions `0..n` into `dir` (made if missing) as `s{i:05}.jsonl`, in order.
pub fn write_small_sessions(dir: &Path, n: usize) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    (0..n)
        .map(|i| {
            let path = dir.join(format!("s{i:05}.jsonl"));
            std::fs::write(&path, small_session(i))?;
            Ok(path)
        })
        .collect()
}
