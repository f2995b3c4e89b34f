//! Provider faults, seen from outside the daemon: the real `compactd` binary over stdio, its
//! summarizer pointed at the fault-injecting fake provider, one compaction per fault.
//!
//! For every fault the suite checks what a user relies on: a transient failure is retried (with
//! Pi's retry events, honouring a `Retry-After`) and the compaction then succeeds; a permanent
//! one ends in a `compaction_end` with a clear `errorMessage` and a JSON-RPC error, and the
//! session file is byte-for-byte unchanged; and all the while another session on the same
//! daemon keeps answering (`getContextUsage` returns at once during the fault).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use support::daemon_env::{keep_recent, open, Env};
use support::fake_llm::{self, FakeLlm, Fault};
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(60);
/// The daemon's stream idle timeout in this suite (seconds): slow headers and stalls last longer.
const IDLE_SECS: u64 = 1;
const REPLY: &str = "FAULT SUITE SUMMARY";
/// How long another session's `getContextUsage` may take while a fault is in progress.
const SERVED_WITHIN: Duration = Duration::from_millis(1500);

/// What a fault must lead to.
struct Expect {
    /// `summarization_retry_scheduled` events (= extra requests to the provider).
    retries: usize,
    /// The compaction succeeds after the retries (else it fails and writes nothing).
    succeeds: bool,
    /// Text the first retry's error (when retried) or the final error must contain.
    error_contains: &'static str,
    /// The first retry waits at least this long (a `Retry-After`).
    min_first_delay_ms: u64,
    /// The fault lasts long enough that the probe of the other session happens during it.
    lasts: bool,
}

struct Rig {
    env: Env,
    fake: FakeLlm,
    c: Client,
    other: String,
    n: usize,
    /// The summarizer talks to the fake (not to a refused port), so its requests can be counted.
    counts_requests: bool,
    _rt: tokio::runtime::Runtime,
}

impl Rig {
    /// A daemon whose summarizer is the fake over OpenAI chat completions (or, with `port`,
    /// whatever listens there).
    fn new(port: Option<u16>) -> Rig {
        Rig::speaking("openai-completions", port)
    }

    /// [`Rig::new`] over the given protocol (`openai-completions` or `anthropic-messages`).
    fn speaking(provider: &str, port: Option<u16>) -> Rig {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let fake = rt.block_on(fake_llm::start(vec![(REPLY.into(), "stop".into()); 64]));
        let env = Env::new();
        let counts_requests = port.is_none();
        let port = port.unwrap_or(fake.port);
        let base = match provider {
            "anthropic-messages" => format!("http://127.0.0.1:{port}"),
            _ => format!("http://127.0.0.1:{port}/v1"),
        };
        env.write_config(&format!(
            "[summarizer]\nprovider = \"{provider}\"\nbase_url = \"{base}\"\nmodel = \"fake-model\"\nmax_tokens = 4096\nidle_timeout_secs = {IDLE_SECS}\nretry = {{ enabled = true, maxRetries = 2, baseDelayMs = 50 }}\n"
        ));
        let mut c = env.stdio(&[], Framing::Ndjson);
        let other_file = env.session_as("024-compacted-once", "other");
        let other = open(&mut c, &other_file);
        Rig {
            env,
            fake,
            c,
            other,
            n: 0,
            counts_requests,
            _rt: rt,
        }
    }

    /// Injects `faults`, compacts a fresh session and checks the outcome against `expect`.
    /// Returns the number of faults the provider served.
    fn check(&mut self, name: &str, faults: Vec<Fault>, expect: Expect) -> usize {
        self.n += 1;
        let file: PathBuf = self
            .env
            .session_as("009-bash-executions", &format!("fault-{}", self.n));
        // 1000 recent tokens: one summarization call (no split turn), so provider requests
        // are exactly one plus the retries.
        let sid = open(&mut self.c, &file);
        keep_recent(&mut self.c, &sid, 1000);
        self.c.ok("subscribe", json!({"sessionId": sid}));
        let before = std::fs::read(&file).expect("read session");
        let requests_before = self.fake.requests().len();
        let injected = faults.len();
        self.fake.inject(faults);
        self.c.notifications.clear();
        self.c.log.clear();

        let compact = self.c.send("compact", json!({"sessionId": sid}));
        self.c
            .wait_notification("compaction_start", LONG)
            .unwrap_or_else(|| panic!("{name}: no compaction_start"));
        // Another session is served while this one's provider misbehaves.
        let t = Instant::now();
        let probe = self
            .c
            .send("getContextUsage", json!({"sessionId": self.other}));
        let usage = self.c.wait(probe, LONG);
        let probe_took = t.elapsed();
        assert!(usage.is_ok(), "{name}: other session: {usage:?}");
        assert!(
            probe_took < SERVED_WITHIN,
            "{name}: another session waited {probe_took:?} during the fault"
        );
        let reply = self.c.wait(compact, LONG);
        if expect.lasts {
            let pos = |id: u64| self.c.log.iter().position(|m| m["id"] == id);
            assert!(
                pos(probe) < pos(compact),
                "{name}: the probe must be answered while the compaction still runs"
            );
        }
        let end = self
            .c
            .wait_notification("compaction_end", LONG)
            .unwrap_or_else(|| panic!("{name}: no compaction_end"));
        let events: Vec<Value> = self
            .c
            .notifications
            .iter()
            .filter(|n| n["params"]["sessionId"] == sid.as_str())
            .cloned()
            .collect();
        let scheduled: Vec<&Value> = events
            .iter()
            .filter(|n| n["method"] == "summarization_retry_scheduled")
            .map(|n| &n["params"])
            .collect();
        assert_eq!(
            scheduled.len(),
            expect.retries,
            "{name}: retries; events {events:?}"
        );
        let sent = self.fake.requests().len() - requests_before;
        if self.counts_requests {
            let reqs = self.fake.requests();
            let t0 = reqs[requests_before].at;
            let times: Vec<(Duration, &str)> = reqs[requests_before..]
                .iter()
                .map(|r| (r.at.duration_since(t0), r.path.as_str()))
                .collect();
            assert_eq!(
                sent,
                1 + expect.retries,
                "{name}: provider requests {times:?}; events {events:?}"
            );
        }
        if let Some(first) = scheduled.first() {
            let msg = first["errorMessage"].as_str().unwrap_or_default();
            assert!(
                msg.contains(expect.error_contains),
                "{name}: retry error {msg:?} lacks {:?}",
                expect.error_contains
            );
            let delay = first["delayMs"].as_u64().unwrap_or(0);
            assert!(
                delay >= expect.min_first_delay_ms.max(50),
                "{name}: first retry after {delay} ms"
            );
            if expect.min_first_delay_ms > 0 {
                let reqs = self.fake.requests();
                let gap = reqs[requests_before + 1]
                    .at
                    .duration_since(reqs[requests_before].at);
                assert!(
                    gap >= Duration::from_millis(expect.min_first_delay_ms),
                    "{name}: retried after {gap:?}, asked {} ms",
                    expect.min_first_delay_ms
                );
            }
            assert!(
                events
                    .iter()
                    .any(|n| n["method"] == "summarization_retry_finished"),
                "{name}: no summarization_retry_finished"
            );
        }
        let after = std::fs::read(&file).expect("read session");
        if expect.succeeds {
            let r = reply.unwrap_or_else(|e| panic!("{name}: compact failed: {e}"));
            assert!(
                r["summary"].as_str().unwrap_or("").starts_with(REPLY),
                "{name}: {r}"
            );
            assert!(after.starts_with(&before), "{name}: existing bytes changed");
            let added = String::from_utf8_lossy(&after[before.len()..]).into_owned();
            assert_eq!(added.lines().count(), 1, "{name}: one compaction line");
            let entry: Value = serde_json::from_str(added.trim_end()).expect("entry JSON");
            assert_eq!(entry["type"], "compaction", "{name}");
            assert!(end["params"].get("errorMessage").is_none(), "{name}: {end}");
        } else {
            let e = reply.expect_err(name);
            let msg = end["params"]["errorMessage"].as_str().unwrap_or_default();
            assert!(
                msg.contains(expect.error_contains),
                "{name}: compaction_end error {msg:?} lacks {:?}",
                expect.error_contains
            );
            assert!(
                e["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(expect.error_contains),
                "{name}: reply error {e}"
            );
            assert_eq!(end["params"]["aborted"], false, "{name}: {end}");
            assert_eq!(
                after, before,
                "{name}: a failed compaction wrote to the file"
            );
        }
        // The session stays usable after the fault.
        let usage = self.c.ok("getContextUsage", json!({"sessionId": sid}));
        assert!(usage.is_object(), "{name}: {usage}");
        self.c.ok("closeSession", json!({"sessionId": sid}));
        println!("{name}: ok ({sent} provider requests; other session answered in {probe_took:?})");
        injected
    }
}

fn retried(error_contains: &'static str, lasts: bool) -> Expect {
    Expect {
        retries: 1,
        succeeds: true,
        error_contains,
        min_first_delay_ms: 0,
        lasts,
    }
}

fn fails(retries: usize, error_contains: &'static str) -> Expect {
    Expect {
        retries,
        succeeds: false,
        error_contains,
        min_first_delay_ms: 0,
        lasts: false,
    }
}

/// Peak resident memory of a process, in KiB (Linux `VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn every_provider_fault_is_retried_or_reported_and_never_written() {
    let mut rig = Rig::new(None);
    let mut faults = 0;
    let slow = Duration::from_secs(IDLE_SECS + 2);
    faults += rig.check(
        "slow headers",
        vec![Fault::SlowHeaders(slow)],
        retried("timed out", true),
    );
    faults += rig.check(
        "stall mid-stream",
        vec![Fault::StallMidStream],
        retried("timed out", true),
    );
    faults += rig.check(
        "truncated stream",
        vec![Fault::Truncated],
        retried("Network error", false),
    );
    faults += rig.check(
        "429 Retry-After seconds",
        vec![Fault::rate_limited("1")],
        Expect {
            min_first_delay_ms: 1000,
            ..retried("429", true)
        },
    );
    let in_three = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3));
    faults += rig.check(
        "503 Retry-After HTTP-date",
        vec![Fault::Status {
            status: 503,
            retry_after: Some(in_three),
        }],
        // Whole seconds: of the three, more than two remain when formatted, so at least one
        // second is left whatever the machine's load delays before the request.
        Expect {
            min_first_delay_ms: 1000,
            ..retried("503", true)
        },
    );
    faults += rig.check(
        "429 Retry-After beyond the cap",
        vec![Fault::rate_limited("3600")],
        fails(0, "retry after 3600 s"),
    );
    faults += rig.check(
        "500 on every attempt",
        vec![
            Fault::Status {
                status: 500,
                retry_after: None,
            };
            3
        ],
        fails(2, "500"),
    );
    faults += rig.check(
        "malformed SSE",
        vec![Fault::MalformedSse],
        fails(0, "Could not parse stream chunk"),
    );
    faults += rig.check("length stop", vec![Fault::Length], fails(0, "token cap"));
    faults += rig.check(
        "50 MB response",
        vec![Fault::Huge(50 * 1024 * 1024)],
        fails(0, "too large"),
    );
    if let Some(kib) = rig.c.pid().and_then(peak_rss_kib) {
        println!("peak daemon RSS after the faults: {} MiB", kib / 1024);
        assert!(
            kib < 256 * 1024,
            "the daemon's memory grew to {} MiB",
            kib / 1024
        );
    }
    assert_eq!(rig.c.ok("initialize", json!({}))["serverName"], "compactd");
    println!("provider faults: {faults} injected, all handled");
}

#[test]
fn a_refused_connection_is_retried_then_reported() {
    let mut rig = Rig::new(Some(fake_llm::refused_port()));
    rig.check("connection refused", Vec::new(), fails(2, "onnect"));
}

#[test]
fn anthropic_stream_faults_are_handled_the_same_way() {
    let mut rig = Rig::speaking("anthropic-messages", None);
    let mut faults = rig.check(
        "anthropic stall mid-stream",
        vec![Fault::StallMidStream],
        retried("timed out", true),
    );
    faults += rig.check(
        "anthropic truncated stream",
        vec![Fault::Truncated],
        retried("Network error", false),
    );
    faults += rig.check(
        "anthropic 429 Retry-After",
        vec![Fault::rate_limited("1")],
        Expect {
            min_first_delay_ms: 1000,
            ..retried("429", true)
        },
    );
    faults += rig.check(
        "anthropic malformed SSE",
        vec![Fault::MalformedSse],
        fails(0, "Could not parse Anthropic SSE event"),
    );
    faults += rig.check(
        "anthropic max_tokens stop",
        vec![Fault::Length],
        fails(0, "token cap"),
    );
    faults += rig.check(
        "anthropic 50 MB response",
        vec![Fault::Huge(50 * 1024 * 1024)],
        fails(0, "too large"),
    );
    println!("anthropic provider faults: {faults} injected, all handled");
}

#[test]
fn a_failing_branch_summary_leaves_the_tree_where_it_was() {
    let mut rig = Rig::new(None);
    let file = rig.env.session_as("023-chat-only-no-tools", "navigate");
    let sid = open(&mut rig.c, &file);
    let branch = rig.c.ok("getBranch", json!({"sessionId": sid}));
    let target = branch
        .as_array()
        .and_then(|b| {
            b.iter()
                .filter(|e| e["type"] == "message" && e["message"]["role"] == "user")
                .nth(2)
        })
        .map(|e| e["id"].clone())
        .expect("a user message to go back to");
    let before = std::fs::read(&file).expect("read");
    rig.fake.inject(vec![
        Fault::Status {
            status: 500,
            retry_after: None,
        };
        3
    ]);
    let e = rig
        .c
        .request(
            "navigateTree",
            json!({"sessionId": sid, "targetId": target, "summarize": true}),
        )
        .expect_err("the summary cannot be written");
    assert!(
        e["message"].as_str().unwrap_or_default().contains("500"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "nothing written"
    );
    let leaf = rig.c.ok("getBranch", json!({"sessionId": sid}));
    assert_eq!(leaf, branch, "the leaf did not move");
}

#[test]
fn the_settings_retry_policy_governs_summarization_retries() {
    // The configuration allows two retries; the session's Pi settings allow one. Pi's
    // `settings.retry` governs its summarization calls, so one retry is made and reported.
    let mut rig = Rig::new(None);
    std::fs::write(
        rig.env.path("agent/settings.json"),
        r#"{"retry": {"maxRetries": 1, "baseDelayMs": 20}}"#,
    )
    .expect("write settings.json");
    let file = rig.env.session_as("009-bash-executions", "settings-retry");
    let sid = open(&mut rig.c, &file);
    let settings = rig.c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(
        settings["retry"],
        json!({"enabled": true, "maxRetries": 1, "baseDelayMs": 20})
    );
    keep_recent(&mut rig.c, &sid, 1000);
    let before = rig.fake.requests().len();
    let unavailable = || Fault::Status {
        status: 503,
        retry_after: None,
    };
    rig.fake
        .inject([unavailable(), unavailable(), unavailable()]);
    let e = rig
        .c
        .request("compact", json!({"sessionId": sid}))
        .expect_err("every attempt fails");
    assert_eq!(e["data"]["kind"], "summarization_failed", "{e}");
    assert_eq!(
        rig.fake.requests().len() - before,
        2,
        "the first call and the one retry settings.json allows"
    );
    // The unused fault is the configuration's second retry, never made.
    rig.fake.state.lock().faults.clear();
}

/// A split turn's two calls run at once, and a provider that fails fails both: the daemon's
/// log has one warning per failed try, each naming its call and counting tries out of all there
/// can be (the first and `maxRetries` retries), never two lines nobody can tell apart, never
/// "3/3" before a fourth try.
#[test]
fn each_retry_is_logged_once_named_by_its_call_and_counted() {
    let mut rig = Rig::new(None);
    let file = rig.env.session_as("017-split-turn-with-history", "split");
    let sid = open(&mut rig.c, &file);
    // The recorded case's setting: a split turn with history, so two calls.
    keep_recent(&mut rig.c, &sid, 6000);
    let unavailable = || Fault::Status {
        status: 503,
        retry_after: None,
    };
    // Two failed tries, whichever calls they hit (each call may retry twice).
    rig.fake.inject([unavailable(), unavailable()]);
    let before = rig.fake.requests().len();
    rig.c.ok("compact", json!({"sessionId": sid}));
    let requests = rig.fake.requests();
    let kinds: Vec<String> = requests[before..]
        .iter()
        .map(|r| fake_llm::request_kind(&r.body).to_owned())
        .collect();
    assert_eq!(kinds.len(), 4, "two calls, two retries: {kinds:?}");
    assert!(
        kinds.iter().any(|k| k == "turnPrefix") && kinds.iter().any(|k| k == "history"),
        "a split turn: {kinds:?}"
    );
    let log = rig.env.log_text();
    let retries: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("call failed (try"))
        .collect();
    assert_eq!(retries.len(), 2, "one warning per failed try:\n{log}");
    let mut seen = Vec::new();
    for line in &retries {
        let (label, call) = if line.contains("Turn prefix summarization call failed") {
            ("Turn prefix summarization", "call=turnPrefix")
        } else {
            ("Summarization", "call=history")
        };
        assert!(line.contains(call), "{label} names its call: {line}");
        let try_no = line
            .split("(try ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or_default()
            .to_owned();
        assert!(
            line.contains(&format!("(try {try_no} of 3); retrying in ")),
            "counted out of all three tries: {line}"
        );
        assert!(
            !seen.contains(&(call, try_no.clone())),
            "the same try logged twice:\n{log}"
        );
        seen.push((call, try_no));
    }
}

/// A provider that refuses the key answers 401 with a JSON body that never says "key": the
/// error says the authentication failed and names the variable the key came from, then what the
/// provider said.
#[test]
fn a_refused_key_names_the_variable_it_came_from() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let fake = rt.block_on(fake_llm::start(vec![(REPLY.into(), "stop".into()); 4]));
    let env = Env::new();
    env.write_config(&format!(
        "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"fake-model\"\napi_key_env = \"COMPACTD_FAULTS_KEY\"\n",
        fake.port
    ));
    let vars = env.vars();
    let mut pairs: Vec<(&str, &std::path::Path)> =
        vars.iter().map(|(k, v)| (*k, v.as_path())).collect();
    pairs.push(("COMPACTD_FAULTS_KEY", std::path::Path::new("sk-wrong")));
    let mut c = Client::stdio(&[], &pairs, Framing::Ndjson);
    let file = env.session_as("009-bash-executions", "refused");
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 1000);
    for status in [401, 403] {
        fake.inject([Fault::Status {
            status,
            retry_after: None,
        }]);
        let e = c
            .request("compact", json!({"sessionId": sid}))
            .expect_err("refused");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!(
                "Summarization failed: authentication failed ({status}) — check the key in `COMPACTD_FAULTS_KEY`; the provider said: {status}"
            )),
            "{message}"
        );
    }
}
