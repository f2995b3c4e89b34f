//! An LLM reply with no summary text must not become a compaction entry (a deliberate departure
//! from Pi, which stores it: proto-docs/gaps.md). It fails with `Summarization failed: empty
//! summary`, leaving the file untouched, or falls back to the extractive summarizer when the
//! configuration asks for that.

mod support;

use compactd::compaction::tokens::CompactionSettings;
use compactd::transport::client::Refusal;
use serde_json::json;
use support::compact::compact_file;
use support::fake_llm::{fake_config, start, Protocol};

/// A small session with enough history before the kept tail to compact.
fn session_text() -> String {
    let mut lines = vec![json!({"type":"session","version":3,"id":"s-empty","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}).to_string()];
    let mut parent = serde_json::Value::Null;
    for i in 0..6 {
        let message = if i % 2 == 0 {
            json!({"role":"user","content":format!("request {i}: rename the parser module {}", "and keep tests green ".repeat(40)),"timestamp":1})
        } else {
            json!({"role":"assistant","content":[{"type":"text","text":format!("done with step {i}")}],"api":"openai-completions","provider":"p","model":"m","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1})
        };
        let id = format!("e{i:07}");
        lines.push(json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:01.000Z","message":message}).to_string());
        parent = json!(id);
    }
    lines.join("\n") + "\n"
}

async fn compact_with_reply(
    reply: &str,
    fallback_extractive: bool,
) -> (Result<serde_json::Value, Refusal>, bool) {
    let fake = start(vec![(reply.to_string(), "stop".to_string())]).await;
    let mut config = fake_config(Protocol::OpenAiCompletions, fake.port);
    if fallback_extractive {
        config.summarizer.fallback = Some(compactd::config::Fallback::Extractive);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.jsonl");
    let before = session_text();
    std::fs::write(&path, &before).expect("write session");
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 16384,
        keep_recent_tokens: 50,
    };
    let result = compact_file(config, &path, &settings, None).await;
    let after = std::fs::read_to_string(&path).expect("read session");
    assert_eq!(
        fake.state.lock().received.len(),
        1,
        "one summarization call"
    );
    (result.map(|c| c.result), after == before)
}

#[tokio::test]
async fn an_empty_or_blank_reply_fails_and_writes_nothing() {
    for reply in ["", "  \n\t "] {
        let (result, untouched) = compact_with_reply(reply, false).await;
        match result {
            Err(r) if r.kind() == Some("summarization_failed") => {
                assert_eq!(
                    r.message, "Summarization failed: empty summary",
                    "reply {reply:?}"
                )
            }
            other => panic!("reply {reply:?}: expected a summarization failure, got {other:?}"),
        }
        assert!(untouched, "the session file changed for reply {reply:?}");
    }
}

#[tokio::test]
async fn an_empty_reply_falls_back_to_extractive_when_configured() {
    let (result, untouched) = compact_with_reply(" ", true).await;
    let result = result.expect("the extractive fallback compacts");
    assert!(!untouched, "the compaction entry is appended");
    assert_eq!(result["details"]["summarizer"], "extractive", "{result}");
    assert_eq!(
        result["details"]["fallbackReason"],
        "Summarization failed: empty summary"
    );
    let summary = result["summary"].as_str().unwrap_or("");
    assert!(
        summary.starts_with("## Goal") && summary.contains("rename the parser module"),
        "{summary}"
    );
}

#[tokio::test]
async fn a_real_reply_is_still_stored() {
    let (result, untouched) = compact_with_reply("## Goal\nRename the parser.", false).await;
    let result = result.expect("compacts");
    assert!(!untouched);
    assert!(result["summary"]
        .as_str()
        .unwrap_or("")
        .starts_with("## Goal\nRename the parser."));
}
