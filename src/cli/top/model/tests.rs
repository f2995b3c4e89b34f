use super::*;
use serde_json::json;

fn info(id: &str, tokens: f64) -> Value {
    json!({
        "sessionId": id,
        "path": format!("/home/u/proj/sessions/2026-12-01T13-03-26-645Z_0000-{id:0>8}.jsonl"),
        "headerId": "h", "cwd": "/home/u/proj", "leafId": "l", "entryCount": 9,
        "persisted": true,
        "model": {"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 200000, "maxTokens": 64000},
        "thinkingLevel": "medium", "isCompacting": false,
        "contextTokens": tokens, "threshold": 183616, "autoCompaction": "on"
    })
}

fn model_with(list: Value) -> TopModel {
    let mut m = TopModel::new();
    m.connected(0, "/tmp/s.sock");
    m.apply_snapshot(&list, 0).expect("snapshot");
    m
}

fn texts(m: &TopModel) -> Vec<String> {
    m.events()
        .map(|e| match &e.session_id {
            Some(s) => format!("{s} {}", e.text),
            None => e.text.clone(),
        })
        .collect()
}

#[test]
fn a_snapshot_gives_one_row_per_session_in_id_order() {
    let m = model_with(json!([info("s10", 50000.0), info("s2", 4123.0)]));
    let rows = m.rows("", 0);
    let ids: Vec<&str> = rows.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!(ids, ["s2", "s10"]);
    let r = &rows[0];
    assert_eq!(r.name, "proj/000000s2");
    assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(r.tokens, Some(4123.0));
    assert_eq!(r.threshold, Some(183616.0));
    assert_eq!(r.window, Some(200000));
    assert_eq!(r.percent().map(|p| format!("{p:.1}")), Some("2.1".into()));
    assert_eq!(r.state, RowState::Idle);
    assert_eq!(r.last, None);
    assert!(!r.stale);
}

#[test]
fn a_compaction_shows_in_its_row_and_in_the_event_pane() {
    let mut m = model_with(json!([info("s1", 150000.0), info("s2", 1000.0)]));
    let follow = m.apply_event(
        "compaction_start",
        &json!({"sessionId": "s1", "reason": "threshold"}),
        1_000,
    );
    assert_eq!(
        follow,
        Follow::default(),
        "a known session needs no refresh"
    );
    let r = &m.rows("", 3_500)[0];
    assert_eq!(
        r.state,
        RowState::Compacting {
            reason: "threshold".into(),
            elapsed_ms: Some(2_500),
            retry: None
        }
    );
    assert_eq!(r.state.label(), "compacting threshold 2.5s");
    assert_eq!(r.state.word(), "compacting:threshold:2.5s");
    m.apply_event(
        "summarization_retry_scheduled",
        &json!({"sessionId": "s1", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": "503"}),
        2_000,
    );
    assert_eq!(
        m.rows("", 4_000)[0].state.label(),
        "compacting threshold 3.0s (retry 1/3)"
    );
    m.apply_event(
        "compaction_end",
        &json!({"sessionId": "s1", "reason": "threshold", "aborted": false, "willRetry": false,
                "result": {"summary": "…", "firstKeptEntryId": "e1", "tokensBefore": 150000,
                           "estimatedTokensAfter": 9000, "details": {"summarizer": "extractive"},
                           "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "usd": 0.0125},
                           "handoff": {"score": 0.75, "byKind": {"file": {"owed": 4, "carried": 3, "score": 0.75}},
                                       "missing": [{"kind": "file", "text": "src/a.rs (edited)", "entryId": "e0"}],
                                       "mode": "repair", "repaired": 1}}}),
        5_000,
    );
    let r = &m.rows("", 65_000)[0];
    assert_eq!(r.state, RowState::Idle);
    assert_eq!(r.tokens, Some(9000.0), "the context the compaction left");
    assert_eq!(
        r.last,
        Some(Last {
            at_ms: Some(5_000),
            tokens_before: Some(150000.0),
            tokens_after: Some(9000.0),
            summarizer: Some("extractive".into()),
            duration_ms: Some(4_000),
            cost: Some(Cost::Usd(0.0125)),
            handoff: Some(0.75),
        })
    );
    assert_eq!(r.last_age_ms, Some(60_000));
    assert_eq!(
        texts(&m)[1..],
        [
            "s1 compaction started (threshold)",
            "s1 summarizer call failed; retry 1/3 in 2.0s: 503",
            "s1 compacted (threshold): 150.0k → 9.0k tokens in 4.0s, $0.0125, handoff 75% (1 missing, 1 repaired)",
        ]
    );
}

#[test]
fn failures_aborts_and_unpriced_costs_read_as_such() {
    let mut m = model_with(json!([info("s1", 1000.0)]));
    m.apply_event(
        "compaction_start",
        &json!({"sessionId": "s1", "reason": "manual"}),
        0,
    );
    m.apply_event(
        "compaction_end",
        &json!({"sessionId": "s1", "reason": "manual", "aborted": true, "willRetry": false}),
        10,
    );
    m.apply_event(
        "compaction_start",
        &json!({"sessionId": "s1", "reason": "manual"}),
        20,
    );
    m.apply_event(
        "compaction_end",
        &json!({"sessionId": "s1", "reason": "manual", "aborted": false, "willRetry": false,
                "errorMessage": "Compaction failed: Nothing to compact (session too small)"}),
        30,
    );
    assert_eq!(m.rows("", 40)[0].state, RowState::Idle);
    assert_eq!(m.rows("", 40)[0].last, None);
    m.apply_event(
        "compaction_end",
        &json!({"sessionId": "s1", "reason": "overflow", "aborted": false, "willRetry": true,
                "result": {"summary": "s", "firstKeptEntryId": "e1", "tokensBefore": 5000, "estimatedTokensAfter": 700,
                       "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "usd": null}}}),
        50,
    );
    let last = m.rows("", 60)[0].last.clone().expect("last");
    assert_eq!(last.cost, Some(Cost::Unpriced));
    assert_eq!(last.duration_ms, None, "no start was seen");
    assert_eq!(
        texts(&m)[1..],
        [
            "s1 compaction started (manual)",
            "s1 compaction aborted (manual)",
            "s1 compaction started (manual)",
            "s1 compaction failed (manual): Compaction failed: Nothing to compact (session too small)",
            "s1 compacted (overflow): 5.0k → 700 tokens, $?, the request is retried",
        ]
    );
}

#[test]
fn speculation_events_drive_the_state() {
    let mut m = model_with(json!([info("s1", 1000.0)]));
    m.apply_event(
        "speculation_started",
        &json!({"sessionId": "s1", "coversThroughEntryId": "abcdef0123", "tokens": 120000}),
        0,
    );
    assert_eq!(
        m.rows("", 0)[0].state.label(),
        "speculating ≤abcdef01 120.0k"
    );
    m.apply_event(
        "speculation_ready",
        &json!({"sessionId": "s1", "coversThroughEntryId": "abcdef0123", "summaryTokens": 2100, "ms": 830}),
        1,
    );
    let r = &m.rows("", 1)[0];
    assert_eq!(r.state.label(), "ready ≤abcdef01 → 2.1k");
    assert_eq!(r.state.word(), "ready:abcdef01:2.1k");
    m.apply_event(
        "speculation_discarded",
        &json!({"sessionId": "s1", "reason": "branchChanged"}),
        2,
    );
    assert_eq!(m.rows("", 2)[0].state, RowState::Idle);
    // A compaction outranks a speculation in the state cell.
    m.apply_event(
        "speculation_started",
        &json!({"sessionId": "s1", "coversThroughEntryId": "x", "tokens": 1}),
        3,
    );
    m.apply_event(
        "compaction_start",
        &json!({"sessionId": "s1", "reason": "idle"}),
        3,
    );
    assert_eq!(m.rows("", 3)[0].state.word(), "compacting:idle:0ms");
    assert_eq!(
        texts(&m)[1..4],
        [
            "s1 speculation started: covers through abcdef01, 120.0k tokens",
            "s1 speculation ready: covers through abcdef01, summary 2.1k tokens in 830ms",
            "s1 speculation discarded: branchChanged",
        ]
    );
    // The snapshot's `speculation` field is read when present.
    let mut with = info("s1", 1000.0);
    with["speculation"] =
        json!({"state": "ready", "coversThroughEntryId": "feedbeef99", "tokens": 90000});
    let m = model_with(json!([with]));
    assert_eq!(m.rows("", 0)[0].state.word(), "ready:feedbeef");
}

#[test]
fn the_thrash_breaker_and_auto_off_show_in_the_state() {
    let mut m = model_with(json!([info("s1", 190000.0)]));
    m.apply_event(
        "compaction_suppressed",
        &json!({"sessionId": "s1", "reason": "floor", "tokensBefore": 195000, "tokensAfter": 190000, "threshold": 183616, "paused": false}),
        0,
    );
    assert_eq!(m.rows("", 0)[0].state, RowState::Suppressed);
    m.apply_event(
        "compaction_suppressed",
        &json!({"sessionId": "s1", "reason": "floor", "tokensBefore": 195000, "tokensAfter": 190000, "threshold": 183616, "paused": true}),
        0,
    );
    assert_eq!(m.rows("", 0)[0].state.label(), "paused (thrash)");
    assert_eq!(
        texts(&m).last().map(String::as_str),
        Some("s1 automatic compaction paused by the thrash breaker (floor: 190.0k tokens after the last one, threshold 183.6k)")
    );
    // The next snapshot is authoritative: a manual compaction resumed it.
    m.apply_snapshot(&json!([info("s1", 1000.0)]), 1).unwrap();
    assert_eq!(m.rows("", 1)[0].state, RowState::Idle);
    let mut off = info("s1", 1000.0);
    off["autoCompaction"] = json!("off");
    m.apply_snapshot(&json!([off]), 2).unwrap();
    assert_eq!(m.rows("", 2)[0].state.word(), "idle:auto-off");
}

#[test]
fn a_snapshot_reports_running_and_last_compactions_and_keeps_what_only_events_said() {
    let mut s1 = info("s1", 9000.0);
    s1["isCompacting"] = json!(true);
    s1["currentCompaction"] =
        json!({"reason": "manual", "startedAt": "2026-01-01T00:00:00.000Z", "elapsedMs": 1500});
    let mut s2 = info("s2", 3000.0);
    s2["lastCompaction"] = json!({"entryId": "c1", "timestamp": "1970-01-01T00:00:10.000Z",
        "tokensBefore": 40000, "tokensAfter": 3000, "summarizer": "extractive", "durationMs": 120});
    let mut m = TopModel::new();
    m.connected(0, "/tmp/s.sock");
    m.apply_snapshot(&json!([s1, s2]), 10_000).unwrap();
    let rows = m.rows("", 10_000);
    assert_eq!(rows[0].state.word(), "compacting:manual:1.5s");
    assert_eq!(rows[1].last_age_ms, Some(0));
    assert_eq!(
        rows[1].last.as_ref().and_then(|l| l.summarizer.as_deref()),
        Some("extractive")
    );
    // The cost only an event told survives a snapshot of the same compaction.
    m.apply_event(
        "compaction_end",
        &json!({"sessionId": "s2", "reason": "manual", "aborted": false, "willRetry": false,
                "result": {"summary": "s", "firstKeptEntryId": "e1", "tokensBefore": 40000, "estimatedTokensAfter": 3000,
                           "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "usd": 0.5}}}),
        10_000,
    );
    let mut s2 = info("s2", 3000.0);
    s2["lastCompaction"] =
        json!({"entryId": "c1", "timestamp": "1970-01-01T00:00:10.000Z", "tokensBefore": 40000});
    m.apply_snapshot(&json!([info("s1", 9000.0), s2]), 11_000)
        .unwrap();
    let last = m.rows("", 11_000)[1].last.clone().expect("last");
    assert_eq!(last.cost, Some(Cost::Usd(0.5)));
    assert_eq!(last.tokens_after, Some(3000.0));
    assert_eq!(m.rows("", 11_000)[0].state, RowState::Idle);
}

#[test]
fn sessions_opened_and_closed_later_are_announced_and_unknown_ones_refresh() {
    let mut m = model_with(json!([info("s1", 1.0)]));
    assert_eq!(
        texts(&m),
        ["connected to /tmp/s.sock"],
        "the first snapshot is silent"
    );
    let follow = m.apply_event(
        "compaction_start",
        &json!({"sessionId": "s7", "reason": "manual"}),
        0,
    );
    assert!(follow.refresh, "an unknown session asks for listSessions");
    let rows = m.rows("", 0);
    assert_eq!(rows.len(), 2, "its row shows at once");
    assert_eq!(
        (rows[1].name.as_str(), &rows[1].state.word()[..10]),
        ("…", "compacting")
    );
    m.apply_snapshot(&json!([info("s7", 1.0), info("s8", 1.0)]), 1)
        .unwrap();
    assert_eq!(
        texts(&m)[2..],
        ["s8 opened proj/000000s8", "s1 closed"],
        "s7 was already known from its event"
    );
    assert!(m.apply_snapshot(&json!({"not": "a list"}), 2).is_err());
    // A member without a session id is skipped, not fatal.
    m.apply_snapshot(&json!([{"path": "/x"}, info("s8", 1.0)]), 3)
        .unwrap();
    assert_eq!(m.rows("", 3).len(), 1);
}

#[test]
fn losing_the_daemon_marks_rows_stale_and_says_so_once_then_reconnected() {
    let mut m = model_with(json!([info("s1", 1.0)]));
    m.disconnected(100, "connection reset");
    m.disconnected(200, "No such file or directory");
    m.retry_in(400);
    assert_eq!(
        m.link(),
        &Link::Down {
            since_ms: 100,
            attempts: 2,
            error: "No such file or directory".into(),
            retry_in_ms: Some(400)
        }
    );
    assert!(m.rows("", 300)[0].stale, "rows show what was last known");
    m.connected(500, "/tmp/s.sock");
    assert_eq!(m.link(), &Link::Up);
    // The first snapshot of the new connection replaces the sessions silently.
    m.apply_snapshot(&json!([info("s1", 2.0)]), 600).unwrap();
    assert!(!m.rows("", 600)[0].stale);
    assert_eq!(
        texts(&m),
        [
            "connected to /tmp/s.sock",
            "daemon disconnected — reconnecting…",
            "reconnected"
        ]
    );
    let mut fresh = TopModel::new();
    fresh.disconnected(0, "Connection refused");
    assert_eq!(
        texts(&fresh),
        ["cannot reach the daemon (Connection refused) — retrying…"]
    );
}

#[test]
fn the_filter_matches_id_name_path_and_model() {
    let mut other = info("s3", 1.0);
    other["cwd"] = json!("/srv/api");
    other["model"]["id"] = json!("gpt-5");
    let m = model_with(json!([info("s1", 1.0), info("s2", 1.0), other]));
    let ids = |f: &str| -> Vec<String> { m.rows(f, 0).into_iter().map(|r| r.session_id).collect() };
    assert_eq!(ids(""), ["s1", "s2", "s3"]);
    assert_eq!(ids("API/"), ["s3"]);
    assert_eq!(ids("gpt"), ["s3"]);
    assert_eq!(ids("s2"), ["s2"]);
    assert_eq!(ids("sessions/2026"), ["s1", "s2", "s3"]);
    assert!(ids("nothing-like-this").is_empty());
}

#[test]
fn replies_to_actions_are_reported() {
    let mut m = model_with(json!([info("s1", 1.0)]));
    m.compact_replied("s1", Ok(&json!({"summary": "x"})), 0);
    m.compact_replied(
        "s1",
        Err(&json!({"code": -32011, "message": "Already compacted"})),
        1,
    );
    m.abort_replied("s1", Ok(&json!({"aborted": false})), 2);
    m.abort_replied("s1", Ok(&json!({"aborted": true})), 3);
    assert_eq!(
        texts(&m)[1..],
        [
            "s1 compact refused: Already compacted",
            "s1 nothing to abort: no compaction runs",
            "s1 abort requested"
        ]
    );
    m.preview_asked("s1");
    assert_eq!(m.preview("s1"), Some(&Preview::Loading));
    assert_eq!(m.preview("s2"), None);
    m.preview_replied("s1", Ok(&json!({"nothingToCompact": "Already compacted"})));
    assert_eq!(
        m.preview("s1"),
        Some(&Preview::Ready(vec![
            "Nothing to compact: Already compacted".into()
        ]))
    );
}

#[test]
fn a_preview_says_what_would_be_summarized_and_kept() {
    let answer = json!({
        "firstKeptEntryId": "e42", "isSplitTurn": true, "tokensBefore": 12345,
        "hasPreviousSummary": true,
        "summarize": {"count": 30, "estimatedTokens": 9000},
        "turnPrefix": {"count": 2, "estimatedTokens": 400},
        "kept": {"count": 5, "estimatedTokens": 2900},
        "fileLists": {"readFiles": ["a", "b", "c", "d", "e", "f", "g"], "modifiedFiles": []},
        "settings": {"enabled": true, "reserveTokens": 16384, "keepRecentTokens": 20000},
        "economics": {"tokensBefore": 12345, "estimatedTokensAfter": 3500,
            "savedTokensPerRequest": 8845, "cacheRewriteTokens": 3500,
            "summarizationInputTokens": 9400, "cacheWarm": true,
            "usd": {"summarization": 0.03, "cacheRewrite": 0.0131, "savedPerRequest": 0.0027},
            "breakEvenRequests": 17}
    });
    let economics = [
        "After: ~3.5k tokens (summary and kept tail), ~8.8k fewer on every request ($0.0027 a request)",
        "Summarizer input: ~9.4k tokens ($0.0300)",
        "Prompt cache: warm; the next request writes ~3.5k tokens again ($0.0131)",
        "Pays for itself: after 17 requests",
    ];
    let head = [
        "Context now: 12.3k tokens",
        "Summarize: 30 messages, ~9.0k tokens, updating the previous summary",
        "Split turn: its first 2 messages (~400 tokens) are summarized apart",
        "Keep verbatim: 5 messages, ~2.9k tokens, from entry e42",
    ];
    let settings = "Settings: reserveTokens 16384, keepRecentTokens 20000";
    // The pane shows six files of a list and counts the rest.
    let pane: Vec<&str> = head
        .iter()
        .copied()
        .chain(["Files read: a, b, c, d, e, f (+1 more)", settings])
        .chain(economics)
        .collect();
    assert_eq!(preview_lines(&answer, Some(6)), pane);
    // `compactd preview` lists them all.
    let all: Vec<&str> = head
        .iter()
        .copied()
        .chain(["Files read: a, b, c, d, e, f, g", settings])
        .chain(economics)
        .collect();
    assert_eq!(preview_lines(&answer, None), all);
}

#[test]
fn the_event_pane_keeps_the_newest_lines() {
    let mut m = model_with(json!([info("s1", 1.0)]));
    for i in 0..(EVENT_LINES + 10) {
        m.apply_event(
            "summary_edited",
            &json!({"sessionId": "s1", "compactionId": format!("c{i}"), "entryId": "e1"}),
            i as i64,
        );
    }
    assert_eq!(m.events().len(), EVENT_LINES);
    assert_eq!(
        m.events().last().map(|e| e.text.as_str()),
        Some(format!("summary of compaction c{} edited", EVENT_LINES + 9).as_str())
    );
}

#[test]
fn names_and_numbers_are_shortened() {
    assert_eq!(
        session_name(
            Some("/home/u/work/compactd"),
            "/x/2026-12-01T13-03-26-645Z_01a231b3-f3b5-747f-bfb8-c1744ed7f516.jsonl"
        ),
        "compactd/4ed7f516"
    );
    assert_eq!(
        session_name(None, "/data/sessions/my-long-session-name-here.jsonl"),
        "sessions/my-long-session…"
    );
    assert_eq!(session_name(Some("/"), "/a.jsonl"), "//a");
    assert_eq!(tokens(950.0), "950");
    assert_eq!(tokens(183616.0), "183.6k");
    assert_eq!(tokens(1_250_000.0), "1.25M");
    assert_eq!(duration(830), "830ms");
    assert_eq!(duration(1250), "1.2s");
    assert_eq!(duration(125_000), "2m05s");
    assert_eq!(age(500), "now");
    assert_eq!(age(12_000), "12s");
    assert_eq!(age(7_200_000), "2h");
    assert_eq!(cost(Cost::Usd(0.01234)), "$0.0123");
    assert_eq!(cost(Cost::Usd(2.5)), "$2.50");
    assert_eq!(short_id("abc"), "abc");
    assert_eq!(short_id("0123456789"), "01234567");
}

#[test]
fn unknown_and_malformed_notifications_show_as_lines_and_change_no_state() {
    let mut m = model_with(json!([info("s1", 1000.0)]));
    let follow = m.apply_event("compaction_paused_forever", &json!({"sessionId": "s9"}), 0);
    assert!(
        follow.refresh,
        "an unknown session still asks for listSessions"
    );
    m.apply_event(
        "compaction_start",
        &json!({"sessionId": "s1", "reason": "whenever"}),
        1,
    );
    assert_eq!(
        m.rows("", 2)[0].state,
        RowState::Idle,
        "nothing was started"
    );
    let t = texts(&m);
    assert_eq!(t[1], "s9 compaction_paused_forever");
    assert!(
        t[2].starts_with("s1 event \"compaction_start\" has an unexpected payload"),
        "{t:?}"
    );
    assert_eq!(m.events().last().map(|e| e.tone), Some(Tone::Warn));
}

#[test]
fn a_clearing_pass_shows_in_the_pane_and_sets_the_row_tokens() {
    let mut m = model_with(json!([info("s1", 150000.0)]));
    m.apply_event(
        "context_cleared",
        &json!({"sessionId": "s1", "entryIds": ["a", "b", "c"], "tokensFreed": 42000,
                "tokensBefore": 150000, "tokensAfter": 108000}),
        1_000,
    );
    assert_eq!(m.rows("", 1_000)[0].tokens, Some(108000.0));
    assert_eq!(
        texts(&m).last().map(String::as_str),
        Some("s1 cleared 3 old tool outputs: 42.0k tokens freed, 150.0k → 108.0k tokens")
    );
}
