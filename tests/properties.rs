//! Property tests over randomly generated Pi session trees: cut points never start at a tool
//! result, a compaction never orphans a tool result, the preparation covers the context exactly,
//! a compaction of a file only ever appends, and the reader / `inspect` never panic on arbitrary input.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

use compactd::compaction::cut_point::find_cut_point;
use compactd::compaction::prepare::{compaction_boundaries, prepare_compaction, NothingToCompact};
use compactd::compaction::summary::{compaction_entry, CompactionOutcome};
use compactd::compaction::tokens::CompactionSettings;
use compactd::context::{build_session_context, context_entries};
use compactd::pi_version::PiVersion;
use compactd::session::{read_session, Entry, EntryKind, ReadOutcome, Role, SessionTree};

use support::compact::compact_file;
use support::fake_llm::{self, Protocol};

// ------------------------------------------------------------------------------------------------
// Session generator
// ------------------------------------------------------------------------------------------------

const CHARS: &[char] = &[
    'a', 'b', 'c', 'x', 'y', ' ', ' ', '\n', '\t', '"', '\\', '/', '{', '}', 'é', 'ß', 'Ж', '中',
    '文', '😀', '🦀', '👩', '\u{200d}', '\u{301}', '\u{7f}', '\u{1}',
];

/// Random text: a short random stem repeated, so lengths range from 0 to ~2000 chars.
fn text() -> impl Strategy<Value = String> {
    (vec(select(CHARS), 0..24), 1usize..80).prop_map(|(cs, rep)| {
        let s: String = cs.into_iter().collect();
        s.repeat(rep)
    })
}

#[derive(Debug, Clone)]
enum Step {
    User(String, bool),
    Assistant(String, Option<u32>),
    /// An assistant with 1..=3 tool calls, then their results (in a shuffled order), with an
    /// optional metadata entry between results.
    Tools {
        text: String,
        outputs: Vec<String>,
        reverse: bool,
        meta_between: bool,
        usage: Option<u32>,
    },
    Bash(String, String, bool),
    CustomMsg(String),
    Meta(u8),
    BranchSummary(String),
    /// A compaction whose `firstKeptEntryId` is a cut point of the current path (or missing).
    Compaction(Index, bool),
    /// Continue from an earlier entry.
    Branch(Index),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (text(), any::<bool>()).prop_map(|(t, a)| Step::User(t, a)),
        3 => (text(), proptest::option::of(0u32..200_000)).prop_map(|(t, u)| Step::Assistant(t, u)),
        5 => (text(), vec(text(), 1..4), any::<bool>(), any::<bool>(), proptest::option::of(0u32..200_000))
            .prop_map(|(text, outputs, reverse, meta_between, usage)| Step::Tools { text, outputs, reverse, meta_between, usage }),
        1 => (text(), text(), any::<bool>()).prop_map(|(c, o, x)| Step::Bash(c, o, x)),
        1 => text().prop_map(Step::CustomMsg),
        2 => (0u8..5).prop_map(Step::Meta),
        1 => text().prop_map(Step::BranchSummary),
        1 => (any::<Index>(), prop::bool::weighted(0.85)).prop_map(|(i, v)| Step::Compaction(i, v)),
        1 => any::<Index>().prop_map(Step::Branch),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    vec(step(), 0..40)
}

/// Builds entries from steps, tracking the tree so branches and compactions point at real ids.
struct Builder {
    lines: Vec<Value>,
    parents: HashMap<String, Option<String>>,
    /// Ids of entries that are cut points (for realistic `firstKeptEntryId`s).
    cut_points: HashSet<String>,
    order: Vec<String>,
    parent: Option<String>,
    next: u32,
    clock: i64,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            lines: vec![json!({
                "type": "session", "version": 3, "id": "0198c0de-0000-7000-8000-000000000001",
                "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp/proj ✨",
            })],
            parents: HashMap::new(),
            cut_points: HashSet::new(),
            order: Vec::new(),
            parent: None,
            next: 1,
            clock: 1_767_225_600_000,
        }
    }

    fn push(&mut self, mut body: Value, cut_point: bool) -> String {
        let id = format!("{:08x}", self.next.wrapping_mul(2_654_435_761));
        self.next += 1;
        self.clock += 1_000;
        let ts = compactd::session::ids::iso_timestamp(self.clock);
        let mut obj = serde_json::Map::new();
        obj.insert("type".into(), body["type"].take());
        obj.insert("id".into(), json!(id));
        obj.insert("parentId".into(), json!(self.parent));
        obj.insert("timestamp".into(), json!(ts));
        for (k, v) in body.as_object().cloned().unwrap_or_default() {
            if k != "type" {
                obj.insert(k, v);
            }
        }
        self.lines.push(Value::Object(obj));
        self.parents.insert(id.clone(), self.parent.clone());
        if cut_point {
            self.cut_points.insert(id.clone());
        }
        self.order.push(id.clone());
        self.parent = Some(id.clone());
        id
    }

    fn message(&mut self, mut m: Value, cut_point: bool) -> String {
        m["timestamp"] = json!(self.clock);
        self.push(json!({"type": "message", "message": m}), cut_point)
    }

    fn usage(u: Option<u32>) -> Value {
        match u {
            Some(n) => json!({"input": n, "output": 100, "cacheRead": 0, "cacheWrite": 0,
                "totalTokens": n + 100,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}),
            None => {
                json!({"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}})
            }
        }
    }

    fn current_path(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = self.parent.clone();
        while let Some(id) = cur {
            cur = self.parents.get(&id).cloned().flatten();
            out.push(id);
        }
        out.reverse();
        out
    }

    fn meta(&mut self, kind: u8) {
        let body = match kind {
            0 => json!({"type": "model_change", "provider": "fake", "modelId": "m-🦀"}),
            1 => json!({"type": "thinking_level_change", "thinkingLevel": "high"}),
            2 => {
                let target = self.order.last().cloned();
                json!({"type": "label", "targetId": target, "label": "ラベル"})
            }
            3 => json!({"type": "session_info", "name": "sess ✨"}),
            _ => json!({"type": "custom", "customType": "ext", "data": {"k": [1, 2]}}),
        };
        self.push(body, false);
    }

    fn apply(&mut self, s: &Step) {
        match s {
            Step::User(t, array) => {
                let content = if *array {
                    json!([{"type": "text", "text": t}])
                } else {
                    json!(t)
                };
                self.message(json!({"role": "user", "content": content}), true);
            }
            Step::Assistant(t, u) => {
                self.message(
                    json!({"role": "assistant", "content": [{"type": "text", "text": t}],
                        "api": "openai-completions", "provider": "fake", "model": "m",
                        "usage": Self::usage(*u), "stopReason": "stop"}),
                    true,
                );
            }
            Step::Tools {
                text,
                outputs,
                reverse,
                meta_between,
                usage,
            } => {
                let base = self.next;
                let calls: Vec<(String, String)> = (0..outputs.len())
                    .map(|i| (format!("call_{base}_{i}"), format!("src/f{}.rs", i % 2)))
                    .collect();
                let mut content = vec![json!({"type": "text", "text": text})];
                for (i, (id, path)) in calls.iter().enumerate() {
                    let name = ["read", "edit", "write"][i % 3];
                    content.push(json!({"type": "toolCall", "id": id, "name": name,
                        "arguments": {"path": path}}));
                }
                self.message(
                    json!({"role": "assistant", "content": content, "api": "openai-completions",
                        "provider": "fake", "model": "m", "usage": Self::usage(*usage),
                        "stopReason": "toolUse"}),
                    true,
                );
                let mut order: Vec<usize> = (0..outputs.len()).collect();
                if *reverse {
                    order.reverse();
                }
                for (n, i) in order.into_iter().enumerate() {
                    if *meta_between && n == 1 {
                        self.meta(2);
                    }
                    let name = ["read", "edit", "write"][i % 3];
                    self.message(
                        json!({"role": "toolResult", "toolCallId": calls[i].0, "toolName": name,
                            "content": [{"type": "text", "text": outputs[i]}], "isError": false}),
                        false,
                    );
                }
            }
            Step::Bash(c, o, exclude) => {
                let mut m = json!({"role": "bashExecution", "command": c, "output": o,
                    "exitCode": 1, "cancelled": false, "truncated": false});
                if *exclude {
                    m["excludeFromContext"] = json!(true);
                }
                self.message(m, true);
            }
            Step::CustomMsg(t) => {
                self.push(
                    json!({"type": "custom_message", "customType": "note", "content": t,
                        "display": true}),
                    true,
                );
            }
            Step::Meta(k) => self.meta(*k),
            Step::BranchSummary(t) => {
                let from = self.order.first().cloned();
                self.push(
                    json!({"type": "branch_summary", "fromId": from, "summary": t}),
                    !t.is_empty(),
                );
            }
            Step::Compaction(idx, valid) => {
                let path = self.current_path();
                let candidates: Vec<String> = path
                    .into_iter()
                    .filter(|id| self.cut_points.contains(id))
                    .collect();
                let target = if *valid && !candidates.is_empty() {
                    candidates[idx.index(candidates.len())].clone()
                } else {
                    "no-such-entry".to_owned()
                };
                self.push(
                    json!({"type": "compaction", "summary": "old summary ✨", "firstKeptEntryId": target,
                        "tokensBefore": 1234, "details": {"readFiles": ["a.rs"], "modifiedFiles": []},
                        "fromHook": false}),
                    false,
                );
            }
            Step::Branch(idx) => {
                if !self.order.is_empty() {
                    self.parent = Some(self.order[idx.index(self.order.len())].clone());
                }
            }
        }
    }
}

fn build(steps: &[Step]) -> Vec<Value> {
    let mut b = Builder::new();
    for s in steps {
        b.apply(s);
    }
    b.lines
}

fn to_jsonl(lines: &[Value]) -> String {
    let mut out = String::new();
    for l in lines {
        out.push_str(&compactd::json::stringify(l));
        out.push('\n');
    }
    out
}

fn parse_tree(bytes: &[u8]) -> Result<SessionTree, TestCaseError> {
    match read_session(bytes) {
        ReadOutcome::Session(p) => Ok(SessionTree::from_parsed(p)),
        other => Err(TestCaseError::fail(format!("not a session: {other:?}"))),
    }
}

// ------------------------------------------------------------------------------------------------
// Checks
// ------------------------------------------------------------------------------------------------

/// Tool results whose call does not appear in an earlier assistant message of `messages`.
fn orphan_tool_results(messages: &[Value]) -> Vec<String> {
    let mut calls = HashSet::new();
    let mut orphans = Vec::new();
    for m in messages {
        match m["role"].as_str() {
            Some("assistant") => {
                for block in m["content"].as_array().into_iter().flatten() {
                    if block["type"] == "toolCall" {
                        if let Some(id) = block["id"].as_str() {
                            calls.insert(id.to_owned());
                        }
                    }
                }
            }
            Some("toolResult") => {
                let id = m["toolCallId"].as_str().unwrap_or("").to_owned();
                if !calls.contains(&id) {
                    orphans.push(id);
                }
            }
            _ => {}
        }
    }
    orphans
}

fn ids_of(entries: &[&Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.id_owned().unwrap_or_default())
        .collect()
}

const KEEPS: [i64; 10] = [0, 1, 20, 100, 400, 1_000, 2_500, 6_000, 20_000, 1_000_000];

fn check_tree(tree: &SessionTree, extra_keep: i64) -> Result<(), TestCaseError> {
    let branch = tree.branch();
    let path: Vec<&Entry> = tree.refs(&branch);
    let before_ctx = build_session_context(&path);
    // Sanity of the generator: sessions it writes have no orphan results to begin with.
    prop_assert!(
        orphan_tool_results(&before_ctx.messages).is_empty(),
        "generator produced orphans"
    );
    let pre_ctx_ids: Vec<String> = context_entries(&path)
        .into_iter()
        .filter(|e| e.is_context_visible() && e.kind != EntryKind::Compaction)
        .map(|e| e.id_owned().unwrap_or_default())
        .collect();

    for keep in KEEPS.iter().copied().chain([extra_keep]) {
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: keep,
        };
        // find_cut_point over the whole path and over prepareCompaction's boundaries.
        let b = compaction_boundaries(&path, &settings);
        for (start, cut) in [
            (0, find_cut_point(&path, 0, path.len(), keep)),
            (b.boundary_start, b.cut),
        ] {
            let has_cut_point = (start..path.len()).any(|i| path[i].is_cut_point());
            if has_cut_point {
                let fk = path[cut.first_kept_entry_index];
                prop_assert_ne!(
                    fk.role,
                    Some(Role::ToolResult),
                    "keep={} start={}: cut at a tool result {:?}",
                    keep,
                    start,
                    fk.id
                );
                prop_assert!(cut.first_kept_entry_index >= start);
                if let Some(ts) = cut.turn_start_index {
                    prop_assert!(ts >= start && ts <= cut.first_kept_entry_index);
                    prop_assert!(path[ts].is_turn_start());
                }
            } else if start < path.len() {
                prop_assert_eq!(cut.first_kept_entry_index, start);
            }
        }

        let prep = match prepare_compaction(PiVersion::V0_85, &path, &settings) {
            Ok(p) => p,
            Err(NothingToCompact::AlreadyCompacted) => {
                prop_assert_eq!(path.last().map(|e| e.kind), Some(EntryKind::Compaction));
                continue;
            }
            Err(NothingToCompact::TooSmall) => continue,
        };
        let fk_idx = path
            .iter()
            .position(|e| e.id.as_deref() == Some(prep.first_kept_entry_id.as_str()))
            .ok_or_else(|| TestCaseError::fail("firstKeptEntryId not on the path"))?;
        prop_assert_ne!(path[fk_idx].role, Some(Role::ToolResult));
        prop_assert_eq!(fk_idx, prep.boundaries.cut.first_kept_entry_index);

        // Coverage: summarized + turn prefix + kept == the pre-compaction context, in order.
        let mut covered: Vec<String> = prep
            .messages_to_summarize
            .iter()
            .chain(prep.turn_prefix_messages.iter())
            .map(|m| m.entry_id().unwrap_or_default().to_owned())
            .collect();
        covered.extend(
            path[fk_idx..]
                .iter()
                .filter(|e| e.is_context_visible() && e.kind != EntryKind::Compaction)
                .map(|e| e.id_owned().unwrap_or_default()),
        );
        let unique: HashSet<&String> = covered.iter().collect();
        prop_assert_eq!(unique.len(), covered.len(), "duplicates in {:?}", covered);
        prop_assert_eq!(&covered, &pre_ctx_ids, "keep={}", keep);
        for m in prep
            .messages_to_summarize
            .iter()
            .chain(prep.turn_prefix_messages.iter())
        {
            prop_assert!(m.path_index < fk_idx);
        }
        if prep.is_split_turn {
            prop_assert!(!prep.turn_prefix_messages.is_empty());
        } else {
            prop_assert!(prep.turn_prefix_messages.is_empty());
        }

        // Apply the compaction in memory and rebuild the context.
        let mut after = tree.clone();
        let outcome = CompactionOutcome {
            summary: "NEW SUMMARY 🦀".into(),
            first_kept_entry_id: prep.first_kept_entry_id.clone(),
            tokens_before: prep.tokens_before,
            usage: None,
            details: json!({"readFiles": [], "modifiedFiles": []}),
            from_hook: false,
        };
        let entry = compaction_entry(
            "c0ffee00",
            tree.leaf_id(),
            "2027-01-15T08:00:00.000Z",
            &outcome,
        );
        after.push(Entry::from_value(entry.clone()));
        prop_assert_eq!(
            entry["parentId"].as_str(),
            tree.leaf_id(),
            "parent is old leaf"
        );
        let new_branch = after.branch();
        let new_path = after.refs(&new_branch);
        let ctx_ids = ids_of(&context_entries(&new_path));
        let mut expect_ids = vec![entry["id"].as_str().unwrap_or("").to_owned()];
        expect_ids.extend(ids_of(&path[fk_idx..]));
        prop_assert_eq!(ctx_ids, expect_ids);
        let ctx = build_session_context(&new_path);
        prop_assert_eq!(ctx.messages[0]["role"].as_str(), Some("compactionSummary"));
        let orphans = orphan_tool_results(&ctx.messages);
        prop_assert!(
            orphans.is_empty(),
            "keep={}: orphan tool results {:?}",
            keep,
            orphans
        );
        prop_assert!(
            prepare_compaction(PiVersion::V0_85, &new_path, &settings)
                == Err(NothingToCompact::AlreadyCompacted)
        );
    }
    Ok(())
}

#[test]
fn cut_points_preparation_and_context_invariants() {
    let mut runner = TestRunner::new(Config {
        cases: 128,
        ..Config::default()
    });
    runner
        .run(&(steps(), 0i64..30_000), |(steps, extra)| {
            let lines = build(&steps);
            let tree = parse_tree(to_jsonl(&lines).as_bytes())?;
            prop_assert_eq!(tree.len(), lines.len() - 1);
            check_tree(&tree, extra)
        })
        .unwrap();
}

// ------------------------------------------------------------------------------------------------
// File safety of a compaction through the daemon
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Tail {
    Newline,
    NoFinalNewline,
    TornNoNewline,
    TornWithNewline,
}

fn tail() -> impl Strategy<Value = Tail> {
    prop_oneof![
        Just(Tail::Newline),
        Just(Tail::NoFinalNewline),
        Just(Tail::TornNoNewline),
        Just(Tail::TornWithNewline),
    ]
}

/// The bytes Pi's load leaves on disk for a v3 file: one `\n` appended when the last piece is
/// not blank.
fn loaded_baseline(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        out.push(b'\n');
    }
    out
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write session");
}

#[test]
fn compacting_a_file_only_appends() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (ok_fake, len_fake) = rt.block_on(async {
        let ok = fake_llm::start(vec![("SUMMARY".into(), "stop".into()); 4096]).await;
        let len = fake_llm::start(vec![("TRUNCATED".into(), "length".into()); 4096]).await;
        (ok, len)
    });
    // The daemon's default rules, Pi 1.6's, as `expect_ok` below asks them.
    let mut ok_config = fake_llm::fake_config(Protocol::OpenAiCompletions, ok_fake.port);
    let mut len_config = fake_llm::fake_config(Protocol::OpenAiCompletions, len_fake.port);
    for c in [&mut ok_config, &mut len_config] {
        c.compat.pi_version = compactd::config::PiVersionSetting(PiVersion::V1_6);
    }
    let case = std::sync::atomic::AtomicUsize::new(0);
    let dir = tempfile::tempdir().expect("tempdir");
    let stats = Arc::new(parking_lot::Mutex::new((0usize, 0usize)));
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    let strategy = (
        steps(),
        tail(),
        select(&[0i64, 50, 300, 1_000, 3_000, 20_000][..]),
        1i64..40_000,
    );
    runner
        .run(&strategy, |(steps, tail, keep, reserve)| {
            let lines = build(&steps);
            let mut bytes = to_jsonl(&lines).into_bytes();
            match tail {
                Tail::Newline => {}
                Tail::NoFinalNewline => {
                    bytes.pop();
                }
                Tail::TornNoNewline => {
                    bytes.extend_from_slice(b"{\"type\":\"message\",\"id\":\"torn\",\"mess")
                }
                Tail::TornWithNewline => bytes.extend_from_slice(b"{\"type\":\"mess\xe2\x9c\n"),
            }
            let settings = CompactionSettings {
                enabled: true,
                reserve_tokens: reserve,
                keep_recent_tokens: keep,
            };
            let tree = parse_tree(&bytes)?;
            let old_leaf = tree.leaf_id().map(str::to_owned);
            let branch = tree.branch();
            let prep = prepare_compaction(PiVersion::V1_6, &tree.refs(&branch), &settings);
            let expect_ok = prep.is_ok();
            // A split turn with nothing before it has no history call: Pi 1.6 carries the
            // previous summary on (else "No prior history.", Pi's E3).
            let carried = prep
                .as_ref()
                .ok()
                .filter(|p| p.is_split_turn && p.history.is_empty())
                .map(|p| {
                    format!(
                        "{}\n\n---\n\n**Turn Context (split turn):**\n\nSUMMARY",
                        p.previous_summary.as_deref().unwrap_or("No prior history.")
                    )
                });
            let baseline = loaded_baseline(&bytes);

            // Each case's files are new: a daemon of an earlier case may still be letting go of
            // its file's lock.
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // 1. A good summary: a pure append.
            let file = dir.path().join(format!("ok{n}.jsonl"));
            write_file(&file, &bytes);
            let res = rt.block_on(compact_file(ok_config.clone(), &file, &settings, None));
            let after = std::fs::read(&file).expect("read");
            match res {
                Ok(done) => {
                    prop_assert!(expect_ok, "compacted although prepare said nothing to do");
                    prop_assert!(after.starts_with(&bytes), "pre-existing bytes changed");
                    let added = &after[bytes.len()..];
                    let added = if bytes.ends_with(b"\n") || bytes.is_empty() {
                        added
                    } else {
                        prop_assert_eq!(added.first(), Some(&b'\n'), "missing repair newline");
                        &added[1..]
                    };
                    prop_assert!(added.ends_with(b"\n"));
                    let line = &added[..added.len() - 1];
                    prop_assert!(!line.contains(&b'\n'), "more than one line appended");
                    let entry: Value = serde_json::from_slice(line)
                        .map_err(|e| TestCaseError::fail(format!("appended line: {e}")))?;
                    prop_assert!(
                        support::json_eq(&entry, &done.entry),
                        "appended line differs from the file's last entry: {:?}",
                        support::first_diff(&entry, &done.entry, "entry")
                    );
                    prop_assert_eq!(
                        done.result["firstKeptEntryId"].as_str(),
                        entry["firstKeptEntryId"].as_str()
                    );
                    prop_assert_eq!(entry["type"].as_str(), Some("compaction"));
                    prop_assert_eq!(entry["parentId"].as_str(), old_leaf.as_deref());
                    let summary = entry["summary"].as_str().unwrap_or_default();
                    match &carried {
                        Some(carried) => prop_assert!(
                            summary.starts_with(carried.as_str()),
                            "{summary:?} does not start with {carried:?}"
                        ),
                        None => prop_assert!(summary.starts_with("SUMMARY"), "{summary:?}"),
                    }
                    let reread = parse_tree(&after)?;
                    prop_assert_eq!(reread.len(), tree.len() + 1);
                    let last = &reread.entries()[reread.len() - 1];
                    prop_assert_eq!(last.kind, EntryKind::Compaction);
                    prop_assert_eq!(last.id.as_deref(), entry["id"].as_str());
                    prop_assert_eq!(reread.leaf_id(), entry["id"].as_str());
                    let rb = reread.branch();
                    let ctx = build_session_context(&reread.refs(&rb));
                    prop_assert!(orphan_tool_results(&ctx.messages).is_empty());
                    stats.lock().0 += 1;
                }
                Err(r) if matches!(r.kind(), Some("nothing_to_compact" | "already_compacted")) => {
                    prop_assert!(!expect_ok, "refused although prepare succeeded");
                    prop_assert!(after == baseline, "refusal changed the file");
                    stats.lock().1 += 1;
                }
                Err(e) => return Err(TestCaseError::fail(format!("compact failed: {e}"))),
            }

            // 2. A summary cut off by the length limit: nothing but the load repair.
            let file = dir.path().join(format!("len{n}.jsonl"));
            write_file(&file, &bytes);
            let res = rt.block_on(compact_file(len_config.clone(), &file, &settings, None));
            prop_assert!(res.is_err(), "a length-stopped summary must fail");
            if expect_ok {
                prop_assert!(
                    res.as_ref().err().and_then(|r| r.kind()) == Some("summarization_failed"),
                    "{:?}",
                    res.err()
                );
            }
            let after = std::fs::read(&file).expect("read");
            prop_assert!(after == baseline, "failed compaction changed the file");
            Ok(())
        })
        .unwrap();
    let (ok, refused) = *stats.lock();
    println!("compacting_a_file_only_appends: {ok} compacted, {refused} refused");
    assert!(
        ok > 0,
        "no case compacted: the property was never exercised"
    );
}

// ------------------------------------------------------------------------------------------------
// Robustness on arbitrary input
// ------------------------------------------------------------------------------------------------

fn inspect_all(bytes: &[u8], window: i64, keep: i64, reserve: i64) {
    if let ReadOutcome::Session(p) = read_session(bytes) {
        let tree = SessionTree::from_parsed(p);
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: reserve,
            keep_recent_tokens: keep,
        };
        for version in PiVersion::ALL {
            let report = compactd::report::inspect(&tree, window, &settings, version);
            assert!(report.get("session").is_some());
        }
    }
}

#[test]
fn reader_and_inspect_never_panic_on_random_bytes() {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        ..Config::default()
    });
    runner
        .run(
            &(
                vec(any::<u8>(), 0..512),
                0i64..300_000,
                -10i64..50_000,
                0i64..50_000,
            ),
            |(bytes, w, k, r)| {
                let mut with_header =
                    b"{\"type\":\"session\",\"version\":3,\"id\":\"s\"}\n".to_vec();
                with_header.extend_from_slice(&bytes);
                inspect_all(&bytes, w, k, r);
                inspect_all(&with_header, w, k, r);
                Ok(())
            },
        )
        .unwrap();
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-1e20f64..1e20).prop_map(|f| json!(f)),
        text().prop_map(Value::from),
        select(
            &[
                "user",
                "assistant",
                "toolResult",
                "bashExecution",
                "custom",
                "text",
                "toolCall",
                "thinking",
                "image",
                "a",
                "b",
                "c",
                "hookMessage",
                "branchSummary",
                "compactionSummary"
            ][..]
        )
        .prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec(
                (
                    select(
                        &[
                            "role",
                            "content",
                            "type",
                            "text",
                            "id",
                            "toolCallId",
                            "usage",
                            "input",
                            "output",
                            "totalTokens",
                            "cacheRead",
                            "cacheWrite",
                            "arguments",
                            "name",
                            "path",
                            "timestamp",
                            "command",
                            "summary",
                            "thinking",
                            "data",
                            "mimeType",
                            "stopReason",
                            "exitCode"
                        ][..]
                    ),
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

fn random_entry() -> impl Strategy<Value = Value> {
    (
        select(
            &[
                "message",
                "compaction",
                "branch_summary",
                "custom_message",
                "model_change",
                "thinking_level_change",
                "label",
                "session_info",
                "custom",
                "session",
                "other",
            ][..],
        ),
        proptest::option::of(select(&["a", "b", "c", "d", "e"][..])),
        proptest::option::of(select(&["a", "b", "c", "d", "e", "zz"][..])),
        vec(
            (
                select(
                    &[
                        "message",
                        "summary",
                        "firstKeptEntryId",
                        "tokensBefore",
                        "content",
                        "details",
                        "fromHook",
                        "thinkingLevel",
                        "provider",
                        "modelId",
                        "timestamp",
                        "id",
                        "parentId",
                    ][..],
                ),
                json_value(),
            ),
            0..5,
        ),
    )
        .prop_map(|(ty, id, parent, fields)| {
            let mut o = serde_json::Map::new();
            o.insert("type".into(), json!(ty));
            if let Some(id) = id {
                o.insert("id".into(), json!(id));
            }
            o.insert("parentId".into(), json!(parent));
            for (k, v) in fields {
                o.insert(k.to_owned(), v);
            }
            Value::Object(o)
        })
}

#[test]
fn reader_and_inspect_never_panic_on_random_json_lines() {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        ..Config::default()
    });
    let header = prop_oneof![
        Just(json!({"type": "session", "version": 3, "id": "s", "cwd": "/"})),
        Just(json!({"type": "session", "version": 2, "id": "s"})),
        Just(json!({"type": "session", "id": "s"})),
        json_value(),
    ];
    runner
        .run(
            &(
                header,
                vec(random_entry(), 0..16),
                0i64..300_000,
                0i64..30_000,
                0i64..50_000,
            ),
            |(h, entries, w, k, r)| {
                let mut text = compactd::json::stringify(&h);
                for e in &entries {
                    text.push('\n');
                    text.push_str(&compactd::json::stringify(e));
                }
                inspect_all(text.as_bytes(), w, k, r);
                Ok(())
            },
        )
        .unwrap();
}

/// A JSON string literal's body: plain text, escapes, and sometimes a lone surrogate escape.
fn arb_js_text() -> impl Strategy<Value = String> {
    vec(
        prop_oneof![
            6 => "[a-zA-Z0-9 /._-]{0,12}",
            1 => Just("\\n".to_owned()),
            1 => Just("\\\"".to_owned()),
            1 => Just("é😀".to_owned()),
            1 => Just("\\ud83d".to_owned()),
            1 => Just("\\udc00".to_owned()),
            1 => Just("\\ud83d\\ude00".to_owned()),
        ],
        0..5,
    )
    .prop_map(|parts| parts.concat())
}

/// A JSON number as Pi's files may hold it, including ones beyond f64.
fn arb_js_number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u32..100_000).prop_map(|n| n.to_string()),
        1 => Just("1e400".to_owned()),
        1 => Just("-1e400".to_owned()),
        1 => Just("2.5".to_owned()),
        1 => Just("1e3".to_owned()),
    ]
}

/// Nesting of `n` arrays around a value (past serde_json's limit of 128 at the high end).
fn nested(n: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(n), "]".repeat(n))
}

/// One Pi-shaped session line as text (so it can hold what serde_json cannot build: lone
/// surrogate escapes, numbers beyond f64, deep nesting).
fn arb_session_line() -> impl Strategy<Value = String> {
    let block = prop_oneof![
        arb_js_text().prop_map(|t| format!(r#"{{"type":"text","text":"{t}"}}"#)),
        arb_js_text().prop_map(|t| format!(r#"{{"type":"thinking","thinking":"{t}"}}"#)),
        (select(vec!["read", "write", "edit", "bash"]), arb_js_text(), 0usize..300).prop_map(
            |(name, p, depth)| format!(
                r#"{{"type":"toolCall","id":"c1","name":"{name}","arguments":{{"path":"{p}","x":{}}}}}"#,
                nested(depth, "1")
            )
        ),
    ];
    let content = prop_oneof![
        arb_js_text().prop_map(|t| format!("\"{t}\"")),
        vec(block, 0..4).prop_map(|b| format!("[{}]", b.join(","))),
    ];
    let usage = (arb_js_number(), arb_js_number(), any::<bool>()).prop_map(|(i, t, total)| {
        let total = if total {
            format!(r#","totalTokens":{t}"#)
        } else {
            String::new()
        };
        format!(r#","usage":{{"input":{i},"output":5,"cacheRead":0,"cacheWrite":0{total}}}"#)
    });
    (
        select(vec!["message", "compaction", "label", "custom", "branch_summary", "x"]),
        select(vec!["user", "assistant", "toolResult", "bashExecution", "custom"]),
        arb_js_text(),
        prop::option::of(arb_js_text()),
        content,
        arb_js_number(),
        prop::option::of(usage),
        select(vec!["stop", "toolUse", "error", "length", "aborted", "other"]),
        0usize..260,
    )
        .prop_map(
            |(kind, role, id, parent, content, ts, usage, stop, depth)| {
                let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
                let details = nested(depth, "0");
                match kind {
                    "message" => format!(
                        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"t","message":{{"role":"{role}","content":{content},"timestamp":{ts}{},"stopReason":"{stop}","command":"ls","output":"o","toolName":"read"}}}}"#,
                        usage.unwrap_or_default()
                    ),
                    "compaction" => format!(
                        r#"{{"type":"compaction","id":"{id}","parentId":{parent},"summary":"s","firstKeptEntryId":"{id}","tokensBefore":{ts},"details":{{"x":{details}}}}}"#
                    ),
                    "custom" => format!(
                        r#"{{"type":"custom","customType":"c","data":{{"x":{details},"t":{ts}}},"id":"{id}","parentId":{parent}}}"#
                    ),
                    other => format!(
                        r#"{{"type":"{other}","id":"{id}","parentId":{parent},"summary":{content},"label":"l","targetId":"{id}"}}"#
                    ),
                }
            },
        )
}

/// The proptest form of `fuzz/fuzz_targets/session_line.rs` (cargo-fuzz needs a nightly
/// toolchain): for Pi-shaped lines with lone surrogates, numbers beyond f64 and nesting past
/// serde_json's limit, the facts read from a line's bytes (the load path) are the facts read
/// from its parsed value (the path of migrated and compactd-built entries).
#[test]
fn session_line_facts_from_bytes_match_the_value_path() {
    use compactd::session::entry::parse_line_bytes;
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    let checked = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&arb_session_line(), |line| {
            let raw = line.as_bytes();
            let fast = Entry::from_line(bytes::Bytes::copy_from_slice(raw));
            let slow = parse_line_bytes(raw).map(|r| r.map(Entry::from_value));
            match (fast, slow) {
                (Some(Ok(a)), Some(Ok(b))) => {
                    prop_assert_eq!(a.kind, b.kind, "{}", line);
                    prop_assert_eq!(&a.id, &b.id, "{}", line);
                    prop_assert_eq!(&a.parent_id, &b.parent_id, "{}", line);
                    prop_assert_eq!(a.role, b.role, "{}", line);
                    prop_assert_eq!(a.tokens, b.tokens, "{}", line);
                    prop_assert_eq!(
                        a.usage_tokens().map(f64::to_bits),
                        b.usage_tokens().map(f64::to_bits),
                        "{}",
                        line
                    );
                    prop_assert_eq!(a.stop_reason, b.stop_reason, "{}", line);
                    prop_assert_eq!(&a.file_ops, &b.file_ops, "{}", line);
                    checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                (fast, slow) => {
                    return Err(TestCaseError::fail(format!(
                        "the paths disagree on whether {line} reads: bytes {:?}, value {:?}",
                        fast.map(|r| r.is_ok()),
                        slow.map(|r| r.is_ok())
                    )))
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let n = checked.into_inner();
    println!("session line facts: {n} generated lines read alike by both paths");
    assert_eq!(
        n, 2000,
        "every generated line reads (all are lines Pi reads)"
    );
}
