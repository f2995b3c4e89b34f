//! The lean session engine must agree exactly with Pi's definitions, which the `Value`-based
//! functions implement: facts read in one borrowed pass over a line's bytes equal the facts of the
//! parsed value (duplicate keys, escapes, wrong types and odd numbers included), and the branch
//! index's context estimate equals `estimateContextTokens(buildSessionContext(path))`.

use compactd::compaction::tokens::{estimate_context_tokens, MessageFacts};
use compactd::compaction::BranchIndex;
use compactd::context::build_session_context;
use compactd::session::{read_session, Entry, ReadOutcome, SessionTree};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

/// A JSON text fragment for an arbitrary value (written by hand so lines can carry duplicate
/// keys, escapes and number spellings `serde_json` would never produce).
fn raw_value(depth: u32) -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        select(
            &[
                "0",
                "-0",
                "1.0",
                "1e21",
                "12345678901234567890",
                "-7",
                "0.1",
                "2.5e-8"
            ][..]
        )
        .prop_map(str::to_owned),
        raw_string(),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        3 => leaf,
        1 => vec(raw_value(depth - 1), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
        1 => vec((raw_key(), raw_value(depth - 1)), 0..4).prop_map(|kv| {
            let members: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
            format!("{{{}}}", members.join(","))
        }),
    ]
    .boxed()
}

fn raw_string() -> impl Strategy<Value = String> {
    vec(
        select(
            &[
                "a",
                "é",
                "😀",
                "\\n",
                "\\\"",
                "\\\\",
                "\\u0001",
                "\\u00e9",
                "\\ud83d\\ude00",
                "\\t",
                " ",
                "path",
                "/",
                "\\/",
            ][..],
        ),
        0..6,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()))
}

fn raw_key() -> impl Strategy<Value = String> {
    select(
        &[
            "\"path\"",
            "\"a\"",
            "\"2\"",
            "\"b\"",
            "\"\\u0070ath\"",
            "\"text\"",
            "\"x y\"",
        ][..],
    )
    .prop_map(str::to_owned)
}

/// A content block with fields in random order, some duplicated or of the wrong type.
fn raw_block() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        select(&["\"text\"", "\"image\"", "\"thinking\"", "\"toolCall\"", "5"][..])
            .prop_map(|t| format!("\"type\":{t}")),
        raw_string().prop_map(|s| format!("\"text\":{s}")),
        raw_string().prop_map(|s| format!("\"thinking\":{s}")),
        select(&["\"read\"", "\"write\"", "\"edit\"", "\"bash\"", "null"][..])
            .prop_map(|n| format!("\"name\":{n}")),
        raw_value(2).prop_map(|v| format!("\"arguments\":{v}")),
        (raw_string(), raw_value(1))
            .prop_map(|(p, v)| format!("\"arguments\":{{\"path\":{p},\"x\":{v}}}")),
    ];
    vec(field, 0..6).prop_map(|f| format!("{{{}}}", f.join(",")))
}

fn raw_message() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        select(
            &[
                "\"user\"",
                "\"assistant\"",
                "\"toolResult\"",
                "\"custom\"",
                "\"bashExecution\"",
                "\"branchSummary\"",
                "\"compactionSummary\"",
                "\"other\"",
                "7",
            ][..]
        )
        .prop_map(|r| format!("\"role\":{r}")),
        raw_string().prop_map(|s| format!("\"content\":{s}")),
        vec(raw_block(), 0..4).prop_map(|b| format!("\"content\":[{}]", b.join(","))),
        raw_value(1).prop_map(|v| format!("\"content\":{v}")),
        raw_string().prop_map(|s| format!("\"command\":{s}")),
        raw_string().prop_map(|s| format!("\"output\":{s}")),
        raw_string().prop_map(|s| format!("\"summary\":{s}")),
        select(
            &[
                "\"stop\"",
                "\"error\"",
                "\"aborted\"",
                "\"length\"",
                "\"toolUse\"",
                "1"
            ][..]
        )
        .prop_map(|s| format!("\"stopReason\":{s}")),
        vec(
            (
                select(&["totalTokens", "input", "output", "cacheRead", "cacheWrite"][..]),
                select(&["0", "10", "1.5", "\"3\"", "null", "1e3"][..]),
            ),
            0..6
        )
        .prop_map(|u| {
            let m: Vec<String> = u.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("\"usage\":{{{}}}", m.join(","))
        }),
        select(&["5", "\"u\"", "null"][..]).prop_map(|u| format!("\"usage\":{u}")),
    ];
    let role = select(&["user", "assistant", "toolResult", "custom", "bashExecution"][..]);
    prop_oneof![
        // Mostly a real role first, then fields (which may repeat or override it).
        3 => (role, vec(field.clone(), 0..8)).prop_map(|(r, f)| {
            let mut all = vec![format!("\"role\":\"{r}\"")];
            all.extend(f);
            format!("{{{}}}", all.join(","))
        }),
        1 => vec(field, 0..8).prop_map(|f| format!("{{{}}}", f.join(","))),
    ]
}

fn raw_line() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        select(
            &[
                "\"message\"",
                "\"custom_message\"",
                "\"custom\"",
                "\"label\"",
                "\"compaction\"",
                "\"x\"",
                "3"
            ][..]
        )
        .prop_map(|t| format!("\"type\":{t}")),
        select(&["\"a\"", "\"b\"", "null", "4", "\"\\u0061\""][..])
            .prop_map(|i| format!("\"id\":{i}")),
        select(&["\"a\"", "null", "[]"][..]).prop_map(|i| format!("\"parentId\":{i}")),
        raw_message().prop_map(|m| format!("\"message\":{m}")),
        raw_value(2).prop_map(|m| format!("\"message\":{m}")),
        raw_value(2).prop_map(|c| format!("\"content\":{c}")),
        vec(raw_block(), 0..3).prop_map(|b| format!("\"content\":[{}]", b.join(","))),
        raw_value(1).prop_map(|v| format!("\"summary\":{v}")),
    ];
    prop_oneof![
        // Mostly the shape Pi writes, with random extra fields after it.
        3 => (select(&["message", "custom_message"][..]), raw_message(), vec(field.clone(), 0..3))
            .prop_map(|(t, m, extra)| {
                let body = if t == "message" {
                    format!("\"message\":{m}")
                } else {
                    format!("\"content\":[{{\"type\":\"image\"}}],\"x\":{m}")
                };
                let mut all = vec![format!("\"type\":\"{t}\",\"id\":\"i\",\"parentId\":null"), body];
                all.extend(extra);
                format!("{{{}}}", all.join(","))
            }),
        1 => vec(field, 0..7).prop_map(|f| format!("{{{}}}", f.join(","))),
    ]
}

fn facts(e: &Entry) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {} {:?} {:?} {:?}",
        e.kind,
        e.id,
        e.parent_id,
        e.role,
        e.tokens,
        e.usage_tokens().map(f64::to_bits),
        e.stop_reason,
        e.file_ops
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn line_facts_equal_value_facts(line in raw_line()) {
        let value: Value = match compactd::json::parse_line(&line) {
            Ok(v) => v,
            Err(_) => return Ok(()),
        };
        let fast = Entry::from_line(line.clone().into_bytes().into())
            .expect("not blank")
            .expect("valid JSON");
        let slow = Entry::from_value(value.clone());
        prop_assert_eq!(facts(&fast), facts(&slow), "line: {}", line);
        // The bytes are kept as read, and the value read back is the parsed line.
        let raw = fast.raw().ok();
        prop_assert_eq!(raw.as_deref(), Some(line.as_bytes()));
        prop_assert_eq!(fast.value(), value);
    }
}

/// A byte-level change to a line: most turn it into text that is not JSON, some into other
/// JSON.
#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Insert(usize, &'static [u8]),
    Replace(usize, &'static [u8]),
}

const PIECES: &[&[u8]] = &[
    b"\"", b"\\", b",", b":", b"{", b"}", b"[", b"]", b"0", b"-", b".", b"e", b" ", b"\t", b"\x01",
    b"\xff", b"\xc3", b"\\u", b"\\ud83d", b"\\udc00", b"tru", b"null", b"1e400",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    let piece = select(PIECES);
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), piece.clone()).prop_map(|(i, p)| Mutation::Insert(i, p)),
        (any::<usize>(), piece).prop_map(|(i, p)| Mutation::Replace(i, p)),
    ]
}

fn mutate(line: &str, changes: &[Mutation]) -> Vec<u8> {
    let mut b = line.as_bytes().to_vec();
    for m in changes {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match m {
            Mutation::Delete(i) if !b.is_empty() => {
                let i = at(*i, b.len());
                b.remove(i);
            }
            Mutation::Insert(i, p) => {
                let i = at(*i, b.len() + 1);
                b.splice(i..i, p.iter().copied());
            }
            Mutation::Replace(i, p) if !b.is_empty() => {
                let i = at(*i, b.len());
                b.splice(i..i + 1, p.iter().copied());
            }
            _ => {}
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// The one-pass reader accepts only lines the general reader (Pi's `JSON.parse` rules)
    /// accepts too, and then reads the same facts; whatever it declines goes to the general
    /// reader, which decides.
    #[test]
    fn the_fast_reader_never_accepts_what_the_general_reader_rejects(
        line in raw_line(),
        changes in vec(mutation(), 1..3),
    ) {
        let bytes = mutate(&line, &changes);
        if compactd::session::facts::parse_facts(&bytes).is_err() {
            return Ok(());
        }
        let value = compactd::session::entry::parse_line_bytes(&bytes);
        let Some(Ok(value)) = value else {
            return Err(TestCaseError::fail(format!(
                "accepted, but the general reader says {value:?}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        };
        let fast = Entry::from_line(bytes.clone().into()).expect("not blank").expect("valid JSON");
        prop_assert_eq!(facts(&fast), facts(&Entry::from_value(value)), "line: {}", String::from_utf8_lossy(&bytes));
    }
}

/// A small random session: messages with usage, compactions pointing at earlier entries.
fn session_lines() -> impl Strategy<Value = Vec<Value>> {
    vec(
        (
            0u8..6,
            0usize..2000,
            proptest::option::of(1u32..50_000),
            0usize..40,
        ),
        1..60,
    )
    .prop_map(|steps| {
        let mut lines = vec![json!({"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"})];
        let mut ids: Vec<String> = Vec::new();
        for (i, (kind, chars, usage, back)) in steps.into_iter().enumerate() {
            let id = format!("e{i}");
            let parent = ids.last().cloned();
            let text = "x".repeat(chars);
            let body = match kind {
                0 => json!({"type":"message","message":{"role":"user","content":text,"timestamp":i}}),
                1 => json!({"type":"message","message":{"role":"assistant","content":[{"type":"text","text":text},{"type":"toolCall","id":"t","name":"read","arguments":{"path":format!("f{}.rs", chars % 7)}}],"usage": usage.map(|u| json!({"input":u,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":u+10})),"stopReason":"toolUse","timestamp":i}}),
                2 => json!({"type":"message","message":{"role":"toolResult","toolCallId":"t","toolName":"read","content":[{"type":"text","text":text}],"isError":false,"timestamp":i}}),
                3 if !ids.is_empty() => {
                    let kept = ids[ids.len().saturating_sub(1 + back % ids.len())].clone();
                    json!({"type":"compaction","summary":text,"firstKeptEntryId":kept,"tokensBefore":chars})
                }
                4 => json!({"type":"label","targetId":"e0","label":"l"}),
                _ => json!({"type":"custom_message","customType":"c","content":text,"display":true}),
            };
            let mut o = body.as_object().cloned().unwrap_or_default();
            o.insert("id".into(), json!(id));
            o.insert("parentId".into(), json!(parent));
            o.insert("timestamp".into(), json!("2026-01-01T00:00:00.000Z"));
            lines.push(Value::Object(o));
            ids.push(id);
        }
        lines
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn branch_index_estimate_equals_the_pure_definition(lines in session_lines()) {
        let text: String = lines.iter().map(|l| compactd::json::stringify(l) + "\n").collect();
        let ReadOutcome::Session(parsed) = read_session(text.as_bytes()) else {
            return Err(TestCaseError::fail("not a session"));
        };
        let tree = SessionTree::from_parsed(parsed);
        let branch = tree.branch();
        let path = tree.refs(&branch);
        let pure = estimate_context_tokens(
            build_session_context(&path).messages.iter().map(MessageFacts::of),
        );
        // Built at once, and grown one append at a time, the index gives the same answer.
        let built = BranchIndex::build(&path);
        prop_assert_eq!(built.context_estimate(&path), pure);
        let mut grown = BranchIndex::default();
        for n in 1..=path.len() {
            grown.push(&path[..n]);
        }
        prop_assert_eq!(grown.context_estimate(&path), pure);
        let ctx_total: u64 = build_session_context(&path)
            .messages
            .iter()
            .map(compactd::compaction::tokens::estimate_value)
            .sum();
        prop_assert_eq!(built.context_total(), ctx_total);
    }
}
