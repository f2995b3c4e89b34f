//! Dispatch fuzzing: arbitrary params (random JSON of every type, biased towards the names and
//! values the methods look for) sent to every method of `openrpc.json`, over stdio, to one real
//! daemon with a real session open.
//!
//! Every request must get exactly one well-formed answer (a result, or a JSON-RPC error with an
//! integer code and a message) within a bound; the daemon must never die; a valid request right
//! after each case must still work; and whatever the daemon accepted into the session file must
//! leave a file that every line of parses and that `compactd inspect` loads.
//!
//! Cases: [`SHORT_CASES`] in CI (proptest, fixed seed), [`LONG_CASES`] with
//! `COMPACTD_LONG_TESTS=1`.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Map, Value};

use support::daemon_env::{open, parsed_lines, Env};
use support::rpc_client::Framing;

const SHORT_CASES: u32 = 1000;
const LONG_CASES: u32 = 5000;
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Parameter names the methods read, so random objects often reach past the type checks.
const KEYS: [&str; 30] = [
    "sessionId",
    "path",
    "create",
    "cwd",
    "model",
    "thinkingLevel",
    "message",
    "entry",
    "expectedLeafId",
    "phase",
    "customInstructions",
    "sessionDir",
    "format",
    "detail",
    "targetId",
    "summarize",
    "replaceInstructions",
    "label",
    "hooks",
    "timeoutMs",
    "compaction",
    "contextTokens",
    "contextWindow",
    "settings",
    "events",
    "role",
    "content",
    "type",
    "provider",
    "id",
];

/// Words with meaning somewhere in the protocol.
const WORDS: [&str; 22] = [
    "user",
    "assistant",
    "toolResult",
    "bashExecution",
    "custom",
    "label",
    "session_info",
    "custom_message",
    "compaction",
    "branch_summary",
    "model_change",
    "postRun",
    "midRun",
    "full",
    "llm",
    "agent",
    "high",
    "off",
    "session_before_compact",
    "session_compact",
    "compaction_start",
    "anthropic",
];

fn methods() -> Vec<String> {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto-docs/openrpc.json"),
        )
        .expect("openrpc.json"),
    )
    .expect("openrpc.json parses");
    let names: Vec<String> = doc["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect();
    assert!(
        names.len() > 10,
        "openrpc.json lists {} methods",
        names.len()
    );
    names
}

/// Random JSON: every type, nested, with strings that mean something to the daemon.
fn arb_json(specials: Vec<String>) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-5i64..300_000).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-zA-Z0-9 ._/-]{0,12}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        select(&WORDS[..]).prop_map(Value::from),
        select(specials).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        4 => select(&KEYS[..]).prop_map(str::to_owned),
                        1 => "[a-zA-Z]{1,8}"
                    ],
                    inner
                ),
                0..7
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

#[test]
fn arbitrary_params_to_every_method_always_get_an_answer() {
    let long = std::env::var("COMPACTD_LONG_TESTS").as_deref() == Ok("1");
    let env = Env::new();
    let file = env.session("024-compacted-once");
    let mut c = env.stdio_inside(&["--max-frame", "1000000"], Framing::Ndjson);
    // Hooks the fuzzer registers are answered at once, so no compaction waits on them.
    c.on_request(|_, _| Some(json!({})));
    let sid = open(&mut c, &file);
    let specials = vec![
        sid.clone(),
        file.display().to_string(),
        env.path("fuzz-new.jsonl").display().to_string(),
        env.path("sessions").display().to_string(),
        env.dir.path().display().to_string(),
        "s1".into(),
        "s999".into(),
    ];
    let names = methods();
    let strategy = (
        select(names.clone()),
        prop_oneof![
            6 => arb_json(specials.clone()).prop_map(|v| match v {
                Value::Object(_) => Some(v),
                other => Some(json!({"sessionId": sid, "x": other})),
            }),
            2 => arb_json(specials.clone()).prop_map(Some),
            1 => Just(None),
        ],
    );
    let cases = if long { LONG_CASES } else { SHORT_CASES };
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[7u8; 32]));
    let client = Mutex::new(c);
    let counts = Mutex::new((0usize, 0usize));
    let next_id = Mutex::new(1_000_000u64);
    let result = runner.run(&strategy, |(method, params)| {
        let mut c = client.lock().unwrap_or_else(|p| p.into_inner());
        let id = {
            let mut n = next_id.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        // `params` absent, or any JSON value at all.
        let mut req = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = &params {
            req["params"] = p.clone();
        }
        c.send_value(&req);
        let answer = c.wait(id, ANSWER_WITHIN);
        match &answer {
            Ok(_) => counts.lock().unwrap_or_else(|p| p.into_inner()).0 += 1,
            Err(e) => {
                prop_assert!(
                    e["code"].is_i64() && e["message"].is_string(),
                    "{method} {params:?}: malformed error {e}"
                );
                counts.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
            }
        }
        // A valid request still works.
        let init = c.request("initialize", json!({"clientName": "fuzz"}));
        prop_assert!(
            init.as_ref().is_ok_and(|v| v["serverName"] == "compactd"),
            "after {method} {params:?}: initialize answered {init:?}"
        );
        Ok(())
    });
    let mut c = client.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = result {
        panic!("dispatch fuzzing: {e}");
    }
    let (ok, errors) = counts.into_inner().unwrap_or_else(|p| p.into_inner());
    // Still alive and serving: a fresh session opens, takes an append and reports usage.
    let fresh = env.session_as("009-bash-executions", "after-fuzz");
    let sid2 = open(&mut c, &fresh);
    c.ok(
        "appendMessage",
        json!({"sessionId": sid2, "message": {"role": "user", "content": "still here"}}),
    );
    assert!(c
        .ok("getContextUsage", json!({"sessionId": sid2}))
        .is_object());
    drop(c);
    // Whatever was accepted left loadable files.
    for f in [&file, &fresh] {
        parsed_lines(f).unwrap_or_else(|e| panic!("{e}"));
        env.inspect(f)
            .unwrap_or_else(|e| panic!("inspect {}: {e}", f.display()));
    }
    println!(
        "dispatch fuzzing: {} cases over {} methods: {ok} results, {errors} JSON-RPC errors, daemon alive",
        ok + errors,
        names.len()
    );
    assert_eq!(ok + errors, cases as usize, "every case answered");
}

/// A daemon over stdio spoken to in raw bytes: replies are read as text lines, because a reply
/// that echoes a lone surrogate escape is not something serde_json (the test client) accepts.
struct RawPeer {
    child: support::daemon_env::KillOnDrop,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl RawPeer {
    /// `openSession` of `file` as request 1; its session id.
    fn open(&mut self, file: &std::path::Path) -> String {
        self.send(
            &json!({"jsonrpc":"2.0","id":1,"method":"openSession","params":{"path": file}})
                .to_string(),
        );
        let opened: Value = serde_json::from_str(
            &self.line_starting("{\"jsonrpc\":\"2.0\",\"id\":1,", ANSWER_WITHIN),
        )
        .unwrap();
        opened["result"]["sessionId"].as_str().unwrap().to_owned()
    }

    fn start(env: &Env) -> RawPeer {
        let mut child = env.spawn_stdio(std::process::Stdio::null());
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        RawPeer {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, text: &str) {
        use std::io::Write;
        self.stdin.write_all(text.as_bytes()).expect("write");
        self.stdin.write_all(b"\n").expect("write");
        self.stdin.flush().expect("flush");
    }

    /// The next line that starts with `prefix` (others, such as events, are skipped).
    fn line_starting(&mut self, prefix: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(_) => {}
                Err(_) => panic!(
                    "no line starting with {prefix} within {within:?} (daemon alive: {})",
                    self.child.0.try_wait().ok().flatten().is_none()
                ),
            }
        }
    }
}

/// JavaScript's `JSON.stringify` of a string cut inside an emoji writes a lone surrogate escape
/// (`"\ud83d"`), which `JSON.parse` accepts. Such a request used to fail as a parse error with
/// `id: null`; now it is answered with its own id, and the message is stored with the escape
/// byte for byte, as Pi stores it. Ids that do not survive parsing — above 2^64 (an f64 to serde_json), with an
/// exponent, or a string holding a lone surrogate — are echoed byte for byte, in a batch too.
#[test]
fn lone_surrogates_and_huge_ids_are_answered_with_their_own_id() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let mut p = RawPeer::start(&env);
    let sid = p.open(&file);
    p.send(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"appendMessage","params":{{"sessionId":"{sid}","message":{{"role":"user","content":"cut \ud83d","timestamp":1}}}}}}"#
    ));
    let reply = p.line_starting("{\"jsonrpc\":\"2.0\",\"id\":2,", ANSWER_WITHIN);
    assert!(reply.contains("\"result\""), "accepted: {reply}");
    // Stored as Pi stores it: the lone surrogate escaped, byte for byte.
    let text = std::fs::read_to_string(&file).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.contains(r#""content":"cut \ud83d""#), "{last}");
    for (id, method) in [
        (r#""x\udc00y""#, "listSessions"),
        ("18446744073709551617", "listSessions"),
        ("1e3", "listSessions"),
        ("4", r#"nope\ud83d"#),
    ] {
        p.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{}}}}"#
        ));
        let reply = p.line_starting(
            &format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},"),
            ANSWER_WITHIN,
        );
        if method.starts_with("nope") {
            assert!(reply.contains("-32601"), "method not found: {reply}");
        }
    }
    let big = "340282366920938463463374607431768211457";
    p.send(&format!(
        r#"[{{"jsonrpc":"2.0","id":{big},"method":"listSessions"}},{{"jsonrpc":"2.0","id":"\ud800","method":"listSessions"}}]"#
    ));
    let batch = p.line_starting("[", ANSWER_WITHIN);
    assert!(
        batch.starts_with(&format!("[{{\"jsonrpc\":\"2.0\",\"id\":{big},")),
        "{batch}"
    );
    assert!(
        batch.contains(r#"{"jsonrpc":"2.0","id":"\ud800","#),
        "{batch}"
    );
}

/// A hook reply carrying a lone surrogate escape (a summary cut inside an emoji) used to be a
/// parse error: the daemon then waited the hook's whole timeout and summarized without it. Now
/// it is read at once and its compaction is the one written.
#[test]
fn a_hook_reply_with_a_lone_surrogate_is_taken_at_once() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let mut p = RawPeer::start(&env);
    let sid = p.open(&file);
    p.send(&json!({"jsonrpc":"2.0","id":2,"method":"registerHooks","params":{"sessionId": sid, "hooks": ["session_before_compact"], "timeoutMs": 60000}}).to_string());
    p.line_starting("{\"jsonrpc\":\"2.0\",\"id\":2,", ANSWER_WITHIN);
    let started = std::time::Instant::now();
    p.send(
        &json!({"jsonrpc":"2.0","id":3,"method":"compact","params":{"sessionId": sid}}).to_string(),
    );
    let ask: Value = serde_json::from_str(
        &p.line_starting("{\"jsonrpc\":\"2.0\",\"id\":\"compactd-", ANSWER_WITHIN),
    )
    .unwrap();
    let prep = &ask["params"]["preparation"];
    p.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"compaction":{{"summary":"from the hook \ud83d","firstKeptEntryId":{},"tokensBefore":{}}}}}}}"#,
        ask["id"], prep["firstKeptEntryId"], prep["tokensBefore"]
    ));
    let reply = p.line_starting("{\"jsonrpc\":\"2.0\",\"id\":3,", ANSWER_WITHIN);
    assert!(
        reply.contains(r#""summary":"from the hook \ud83d"#),
        "the hook's summary, its lone surrogate kept: {reply}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not waited out: {:?}",
        started.elapsed()
    );
}

/// Client-controlled strings in log lines (an unknown method's name, a client name, a request
/// id, an error that quotes params) used to be logged whole: one request could write megabytes
/// into the log. Now each is cut to a few hundred bytes, with its full length noted.
#[test]
fn client_strings_are_logged_truncated() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let long = "m".repeat(100_000);
    let e = c.request(&long, json!({})).expect_err("unknown method");
    assert_eq!(e["code"], -32601);
    c.ok("initialize", json!({"clientName": "c".repeat(100_000)}));
    c.notify(&format!("x{long}"), json!({}));
    assert!(c.ok("listSessions", json!({})).is_array());
    // The log is written in the background: wait for the lines.
    let deadline = std::time::Instant::now() + ANSWER_WITHIN;
    while !(env.log_text().contains("client initialized")
        && env.log_text().matches("unknown method").count() >= 2)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(c);
    let log = env.log_text();
    assert!(log.contains("unknown method"), "logged: {log}");
    assert!(log.contains("(100000 bytes)"), "the full length is noted");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest < 2_000,
        "no log line carries a client's 100 kB string (longest {longest} bytes)"
    );
}
