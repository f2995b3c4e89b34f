//! Sessions generated in code, shaped like published ones, for the precision lint: the script
//! corpus holds one planted case per problem, while noise on real sessions comes from volume
//! (a heartbeat every half hour, a grep before every edit, a status poll every minute).
//!
//! Three shapes, each at a few seeds (lengths, numbers and names vary with the seed; the same
//! seed always gives the same session):
//! - an OpenClaw-style assistant run: boilerplate session starts, greetings, heartbeats and
//!   runtime notes that differ only in their timestamp, a workspace reminder re-sent whole,
//!   polling with a different `sleep` each time, a provider error the user pastes, a token in
//!   a failing command's output;
//! - a Pi development session: bursts of `grep`/`find`/`ls`/`read`/`git log` before each edit, a
//!   grep that matches nothing, narration lead-ins ("Now let me look at …:"), test runs that
//!   fail and then pass, commits, a bare `ls` typed as a message;
//! - a harness session with subagents: long subagent reports as tool results, a background
//!   task's full report injected as a user message, a `<system-reminder>` re-sent with a
//!   different count, a status tool and a log tail polled until done.
//!
//! Each session carries probes for what a handoff must keep (the request, the rule, the files,
//! the decision, the commit, the finding, what is left), so recall is measured on them too.

use serde_json::{json, Value};

use super::{assistant, Probe, Script};

/// A small deterministic generator (64-bit LCG); no dependency, no clock.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Builds one session's messages; calls get ids and their results follow them.
struct Builder {
    segments: Vec<Vec<Value>>,
    ts: i64,
    next_id: u32,
}

impl Builder {
    fn new() -> Self {
        Builder {
            segments: vec![Vec::new()],
            ts: 1_767_000_000_000,
            next_id: 0,
        }
    }

    fn push(&mut self, m: Value) {
        self.ts += 1000;
        if let Some(seg) = self.segments.last_mut() {
            seg.push(m);
        }
    }

    fn user(&mut self, text: &str) {
        let ts = self.ts;
        self.push(json!({"role":"user","content":[{"type":"text","text":text}],"timestamp":ts}));
    }

    fn say(&mut self, text: &str) {
        let ts = self.ts;
        self.push(assistant(vec![json!({"type":"text","text":text})], ts));
    }

    fn note(&mut self, kind: &str, text: &str) {
        let ts = self.ts;
        self.push(
            json!({"role":"custom","customType":kind,"content":text,"display":true,"timestamp":ts}),
        );
    }

    /// An assistant turn with optional text and one tool call, then its result.
    fn call(&mut self, text: Option<&str>, tool: &str, args: Value, result: &str, error: bool) {
        self.next_id += 1;
        let id = format!("toolu_{:04}", self.next_id);
        let mut content = Vec::new();
        if let Some(t) = text {
            content.push(json!({"type":"text","text":t}));
        }
        content.push(json!({"type":"toolCall","id":id,"name":tool,"arguments":args}));
        let ts = self.ts;
        let mut m = assistant(content, ts);
        m["stopReason"] = json!("toolUse");
        self.push(m);
        let ts = self.ts;
        self.push(json!({"role":"toolResult","toolCallId":id,"toolName":tool,"content":[{"type":"text","text":result}],"isError":error,"timestamp":ts}));
    }

    /// A shell call the way Pi's bash tool reports it: output, then the exit code when not 0.
    fn bash(&mut self, tool: &str, command: &str, output: &str, code: i64) {
        let body = if output.is_empty() {
            "(no output)".to_string()
        } else {
            output.to_string()
        };
        let result = if code == 0 {
            body
        } else {
            format!("{body}\n\nCommand exited with code {code}")
        };
        self.call(None, tool, json!({"command": command}), &result, code != 0);
    }

    /// Ends a segment (the session is compacted there). Segments end with the user's reply, as
    /// real ones do before a compaction, so the summary covers the assistant's last words.
    fn compact(&mut self, reply: &str) {
        self.user(reply);
        self.segments.push(Vec::new());
    }
}

fn script(name: String, title: &str, b: Builder, probes: Vec<Probe>) -> Script {
    Script {
        name,
        title: title.to_string(),
        keep_recent_tokens: 1,
        reserve_tokens: 16_384,
        focus: None,
        segments: b.segments,
        probes,
    }
}

fn fact(t: &str) -> Probe {
    Probe::Fact(t.to_string())
}

fn inside(section: &str, t: &str) -> Probe {
    Probe::In(section.to_string(), t.to_string())
}

/// Every generated session: three shapes at three seeds, the last seed of each compacted three
/// times over, and a long mixed session compacted ten times.
pub fn corpus() -> Vec<Script> {
    let mut out = Vec::new();
    for seed in 1..=3u64 {
        let segments = if seed == 3 { 3 } else { 1 };
        out.push(openclaw(seed, segments));
        out.push(pi_dev(seed, segments));
        out.push(harness(seed, segments));
    }
    out.push(mixed_long(4));
    for seed in 5..=6u64 {
        out.push(capitalized_harness(seed));
    }
    out
}

/// A base64-looking token of `n` characters (a bearer token, an inline image).
fn blob(rng: &mut Rng, n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..n)
        .map(|_| ALPHABET[rng.below(64) as usize] as char)
        .collect()
}

/// An OpenClaw-style personal-assistant run (see the module docs).
fn openclaw(seed: u64, segments: usize) -> Script {
    let mut rng = Rng(seed * 7919);
    let mut b = Builder::new();
    let (task, file, channel) = [
        (
            "Set up a daily digest of my unread GitHub notifications into digest/notifications.md and send it to Telegram at 08:00",
            "digest/notifications.md",
            "Telegram",
        ),
        (
            "Every morning at 07:30 summarize the new invoices in ~/mail/invoices into finance/invoices.md and post the total to Slack",
            "finance/invoices.md",
            "Slack",
        ),
        (
            "Watch the homelab backups and write a status line per host into ops/backups.md, alerting me on Signal when one is older than a day",
            "ops/backups.md",
            "Signal",
        ),
    ][(seed as usize - 1) % 3];
    let script_path = format!("scripts/job-{seed}.sh");
    b.user("/new\nA new session was started. Greet the user in your configured persona, then ask what they want to do.");
    b.say("Hey! Claw here, ready when you are.");
    b.user(rng.pick(&["yo", "hi", "hey there"]));
    b.say("Hi! What are we working on today?");
    b.user(task);
    b.user("Never post anything to the family group; only to my direct messages.");
    let tree: String = (0..40)
        .map(|i| {
            format!(
                "  {}/file-{i}.md",
                ["notes", "memory", "skills", "digest"][i % 4]
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let rounds = 10 + rng.below(6) as usize;
    let per_segment = rounds.div_ceil(segments);
    for k in 0..rounds {
        if k > 0 && k % per_segment == 0 {
            b.compact("ok");
        }
        let minute = 10 + k * 3;
        b.note(
            "openclaw.runtime",
            &format!(
                "[System] Runtime: agent=main | host=vps-{seed} | model=anthropic/claude-sonnet-4-5 | channel={} | time=2026-03-05T{:02}:{:02}:00Z",
                channel.to_lowercase(),
                8 + minute / 60,
                minute % 60
            ),
        );
        if k % 4 == 0 {
            b.note(
                "workspace-context",
                &format!("Workspace tree as of 2026-03-05 {:02}:{:02}. Read AGENTS.md and SOUL.md before acting; keep MEMORY.md current.\n{tree}", 8 + minute / 60, minute % 60),
            );
        }
        b.user(&format!("Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer or repeat old tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK.\nCurrent time: Thursday, March 5th, 2026 - {:02}:{:02} (Europe/Berlin)", 8 + minute / 60, minute % 60));
        b.say("HEARTBEAT_OK");
        let sleep = 15 * (1 + rng.below(4));
        b.bash(
            "exec",
            &format!("sleep {sleep} && curl -s http://127.0.0.1:18789/health"),
            &format!("{{\"ok\":true,\"uptime\":{}}}", 3600 + k * 97),
            0,
        );
        match k {
            1 => {
                b.bash(
                    "exec",
                    "ls ~/.openclaw/workspace",
                    "AGENTS.md\nSOUL.md\nMEMORY.md\nHEARTBEAT.md\nskills",
                    0,
                );
                b.bash(
                    "exec",
                    "cat ~/.openclaw/workspace/HEARTBEAT.md",
                    "- check the digest job\n",
                    0,
                );
            }
            2 => {
                b.call(
                    Some("I'll go with a shell script run by cron instead of the gateway's own scheduler, because that one does not survive restarts."),
                    "write",
                    json!({"path": script_path, "content": "#!/bin/sh\nset -e\n"}),
                    "Successfully wrote 18 bytes",
                    false,
                );
            }
            3 => {
                // A bundle's minified line in the output: nothing a person reads.
                let minified: String = (0..12)
                    .map(|i| format!("function n{i}(r){{if(t[r])return t[r].exports;var o=t[r]={{i:r,l:!1,exports:{{}}}};"))
                    .collect();
                b.bash(
                    "exec",
                    &format!("node dist/send-{seed}.js --dry-run"),
                    &format!("/app/dist/send.min.js:1\n{minified}{}\n\nSyntaxError: Unexpected token '<' in JSON at position 0 while reading the {channel} reply", blob(&mut rng, 120)),
                    1,
                );
                b.user("got this from the gateway: LLM request rejected: messages.14: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01XyZ. Each `tool_use` block must have a corresponding `tool_result` block in the next message.");
                b.say("That was a transient gateway error; the session is consistent again.");
            }
            5 => {
                b.call(None, "edit", json!({"path": script_path, "edits": [{"oldText": "TOKEN", "newText": "$BOT_TOKEN"}]}), "Successfully replaced 1 block(s).", false);
                b.bash(
                    "exec",
                    &format!("sh {script_path} --dry-run"),
                    &format!("wrote {file}\nwould send 1 message"),
                    0,
                );
            }
            7 => {
                b.bash(
                    "exec",
                    &format!("(crontab -l; echo '30 7 * * * sh ~/{script_path}') | crontab -"),
                    "",
                    0,
                );
            }
            _ => {}
        }
    }
    b.say(&format!("The job is installed in cron and writes {file}; next I will send a test message to {channel} to confirm delivery."));
    b.user("sounds good");
    let probes = vec![
        inside(
            "goal",
            task.split(' ')
                .take(4)
                .collect::<Vec<_>>()
                .join(" ")
                .as_str(),
        ),
        inside("constraints", "family group"),
        fact(file),
        fact(&script_path),
        inside("decisions", "run by cron"),
        inside("blocked", "Unexpected token"),
        fact("test message"),
        Probe::NotIn("goal".into(), "HEARTBEAT_OK || Greet the user".into()),
        Probe::NotIn("constraints".into(), "tool_result".into()),
    ];
    script(
        format!("gen-openclaw-{seed}"),
        "OpenClaw-style assistant run with heartbeats and runtime notes",
        b,
        probes,
    )
}

/// A Pi development session (see the module docs).
fn pi_dev(seed: u64, segments: usize) -> Script {
    let mut rng = Rng(seed * 104_729);
    let mut b = Builder::new();
    let areas = [
        (
            "retry",
            "packages/ai/src/retry.ts",
            "packages/ai/test/retry.test.ts",
        ),
        (
            "compaction",
            "packages/coding-agent/src/core/compaction.ts",
            "packages/coding-agent/test/compaction.test.ts",
        ),
        (
            "tui",
            "packages/tui/src/editor.ts",
            "packages/tui/test/editor.test.ts",
        ),
        (
            "session",
            "packages/coding-agent/src/core/session-manager.ts",
            "packages/coding-agent/test/session-manager.test.ts",
        ),
    ];
    let request = "The retry test in packages/ai/test/retry.test.ts is flaky on CI. Find out why and fix it, then go through the other flaky suites the same way. Do not change the public API of packages/ai.";
    b.user(request);
    let loops = 2 + (seed as usize % 2) + usize::from(segments > 1);
    let mut commits = Vec::new();
    for (k, (area, src, test)) in areas.iter().take(loops).enumerate() {
        if k > 0 && segments > 1 && k % loops.div_ceil(segments) == 0 {
            b.compact("go on");
        }
        if k == 1 {
            b.user("ls");
            b.say("packages/ has ai, agent, coding-agent, tui, web-ui.");
        }
        b.call(
            Some(&format!("Now let me look at the {area} logic:")),
            "grep",
            json!({"pattern": area, "path": "packages"}),
            &format!("{src}:12: export function {area}() {{\n{test}:5: describe('{area}')"),
            false,
        );
        b.call(
            None,
            "find",
            json!({"pattern": "*.test.ts", "path": "packages"}),
            &format!("{test}\npackages/ai/test/stream.test.ts"),
            false,
        );
        b.call(
            None,
            "ls",
            json!({"path": "packages"}),
            "ai\nagent\ncoding-agent\ntui\nweb-ui",
            false,
        );
        b.call(
            None,
            "read",
            json!({"path": src}),
            "export function x() {\n  return setTimeout(run, delay);\n}",
            false,
        );
        b.bash(
            "bash",
            &format!("rg -n 'setTimeout|Date.now' {src}"),
            &format!("{}:{}:  const t = Date.now();", src, 10 + rng.below(90)),
            0,
        );
        b.bash("bash", &format!("grep -rn 'useFakeTimers' {test}"), "", 1);
        b.bash(
            "bash",
            &format!("git log --oneline -5 -- {src}"),
            "a1b2c3d fix: types\n9f8e7d6 feat: initial",
            0,
        );
        b.bash(
            "bash",
            "cat package.json | head -20",
            "{\n  \"name\": \"pi-monorepo\"\n}",
            0,
        );
        b.say(&format!("The approach:\n- inject a clock into {area} instead of reading Date.now()\n- drive it from the test\n\nI'll inject the clock rather than use fake timers, because fake timers leak between suites."));
        b.call(
            None,
            "edit",
            json!({"path": src, "edits": [{"oldText": "Date.now()", "newText": "clock.now()"}]}),
            "Successfully replaced 1 block(s).",
            false,
        );
        b.call(
            None,
            "edit",
            json!({"path": test, "edits": [{"oldText": "it(", "newText": "it.each("}]}),
            "Successfully replaced 1 block(s).",
            false,
        );
        let cmd = format!("npx vitest run {test}");
        b.bash("bash", &cmd, &format!(" FAIL  {test} > {area} > retries after backoff\nAssertionError: expected 2 to be 3 // Object.is equality\n Test Files  1 failed (1)"), 1);
        b.say("Let me check:");
        b.call(
            None,
            "edit",
            json!({"path": src, "edits": [{"oldText": "attempt <", "newText": "attempt <="}]}),
            "Successfully replaced 1 block(s).",
            false,
        );
        b.bash(
            "bash",
            &cmd,
            &format!(
                " ✓ {test} (7 tests) {}ms\n Test Files  1 passed (1)",
                100 + rng.below(400)
            ),
            0,
        );
        let msg = format!("fix({area}): inject the clock so the {area} suite is deterministic");
        b.bash(
            "bash",
            &format!("git add -A && git commit -m \"{msg}\""),
            &format!(
                "[main {:07x}] {msg}\n 2 files changed",
                rng.next() & 0xfff_ffff
            ),
            0,
        );
        commits.push(msg);
        b.user(rng.pick(&["ok", "nice", "good, next one"]));
    }
    let next_area = areas[loops % areas.len()].0;
    b.say(&format!("All {} suites pass with the injected clock. Next I will run the whole test suite and then look at the {next_area} suite.", loops));
    b.user("thanks");
    let mut probes = vec![
        inside("goal", "retry test"),
        inside("constraints", "public API"),
        inside("decisions", "fake timers leak"),
        fact(commits.last().map(String::as_str).unwrap_or("")),
        fact(areas[loops - 1].1),
        fact("whole test suite"),
        Probe::Stale("expected 2 to be 3".into()),
    ];
    if segments == 1 {
        probes.push(fact(&commits[0]));
    }
    script(
        format!("gen-pi-dev-{seed}"),
        "Pi development session with grep/edit/test/commit loops",
        b,
        probes,
    )
}

/// A harness session with subagents and polling (see the module docs).
fn harness(seed: u64, segments: usize) -> Script {
    let mut rng = Rng(seed * 15_485_863);
    let mut b = Builder::new();
    let services = ["billing", "auth", "search"];
    let request = "Audit the billing, auth and search services for N+1 queries and write the findings, worst first, to docs/audit.md. Only read the code; make no changes outside docs/.";
    b.user(request);
    b.say("I'll run one subagent per service in the background and collect their reports.");
    let findings = [
        "InvoiceRepository.list_for_customer issues one query per line item",
        "SessionStore.refresh loads every role of a user separately",
        "IndexFeeder.batch fetches each document's tags in its own query",
    ];
    for (k, svc) in services.iter().enumerate() {
        if segments > 1 && k > 0 {
            b.compact("continue");
        }
        let filler: String = (0..30)
            .map(|i| format!("- checked {svc}/handlers/h{i}.py: no loop over queries"))
            .collect::<Vec<_>>()
            .join("\n");
        let report = format!("## Audit of {svc}\n\nFinding: {} (N+1).\n\n{filler}\n\nRecommendation: prefetch in one query.", findings[k]);
        b.call(
            None,
            "task",
            json!({"description": format!("Audit {svc} for N+1 queries"), "prompt": format!("Read services/{svc} and list every N+1 query pattern.")}),
            &format!("Started background task bg_{svc}_{seed}"),
            false,
        );
        let polls = 3 + rng.below(4);
        for p in 0..polls {
            b.call(
                None,
                "task_status",
                json!({"id": format!("bg_{svc}_{seed}")}),
                if p + 1 < polls {
                    "running"
                } else {
                    "completed"
                },
                false,
            );
            b.bash(
                "bash",
                &format!("sleep {}; tail -n 3 /tmp/{svc}-audit.log", 5 * (p + 1)),
                &format!("scanned {} files", 10 * (p + 1)),
                0,
            );
        }
        b.user(&format!("<system-reminder>\nThe todo list has not been updated in {} turns. Update it if the plan changed; ignore this reminder otherwise and do not mention it to the user.\n</system-reminder>", 3 + k * 4));
        b.user(&format!("<task-notification>\n<task-id>bg_{svc}_{seed}</task-id>\n<status>completed</status>\n<summary>Agent \"Audit {svc} for N+1 queries\" completed</summary>\n<result>\n{report}\n</result>\n</task-notification>"));
        b.say(&format!("The {svc} audit is in: {}.", findings[k]));
    }
    b.call(
        None,
        "write",
        json!({"path": "docs/audit.md", "content": "# N+1 audit\n"}),
        "Successfully wrote 12 bytes",
        false,
    );
    b.say("docs/audit.md lists the three findings, worst first. Next I will open a tracking issue for each finding.");
    b.user("great");
    let probes = vec![
        inside("goal", "N+1 queries"),
        inside("constraints", "Only read the code"),
        fact("docs/audit.md"),
        fact("list_for_customer"),
        fact("IndexFeeder.batch"),
        fact("tracking issue"),
        Probe::NotIn("goal".into(), "task-notification || system-reminder".into()),
    ];
    script(
        format!("gen-harness-{seed}"),
        "Harness session with subagents, background reports and polling",
        b,
        probes,
    )
}

/// A long session mixing the three shapes, compacted ten times: a heartbeat and a runtime note
/// in every span, a burst of looking before each change, a test that fails in one span and is
/// fixed in the next, a background report, a poll. What must survive ten updates: the original
/// request, the rule, the latest commit and decision, the failure left open at the end; and
/// no note, poll or exploration line may pile up across updates.
fn mixed_long(seed: u64) -> Script {
    let mut rng = Rng(seed * 2_750_159);
    let mut b = Builder::new();
    let request = "Migrate the notification service from the legacy queue to the event bus, one consumer per commit, and keep the old queue readable until the last consumer is moved.";
    b.user(request);
    b.user("Never delete messages from the legacy queue; archive them instead.");
    let consumers = [
        "email", "sms", "push", "webhook", "digest", "audit", "billing", "slack", "teams", "pager",
    ];
    let lead_ins = [
        "Now let me look at the {c} consumer:",
        "Let me check how {c} subscribes:",
        "First, the {c} handler:",
    ];
    let mut last_commit = String::new();
    let mut last_decision = String::new();
    for (k, c) in consumers.iter().enumerate() {
        if k > 0 {
            b.compact(["ok", "continue", "go on"][k % 3]);
        }
        let minute = 5 * k;
        b.note(
            "runtime",
            &format!("[runtime] session=notify-migration turn={} time=2026-04-0{}T09:{:02}:00Z tokens={}", 40 + k * 7, 1 + k % 9, minute, 120_000 + k * 3_100),
        );
        b.user(&format!("[heartbeat] {:02}:{:02} - if nothing needs attention reply HEARTBEAT_OK, otherwise continue the current task.", 9 + k / 12, minute));
        b.say("Continuing with the migration.");
        let src = format!("services/notify/consumers/{c}.ts");
        let test = format!("services/notify/test/{c}.test.ts");
        b.call(
            Some(&lead_ins[k % lead_ins.len()].replace("{c}", c)),
            "grep",
            json!({"pattern": "legacyQueue.subscribe", "path": format!("services/notify/consumers/{c}.ts")}),
            &format!("{src}:{}: legacyQueue.subscribe('{c}', handle)", 10 + rng.below(50)),
            false,
        );
        b.call(
            None,
            "read",
            json!({"path": src}),
            "export function handle(msg) {}",
            false,
        );
        b.bash(
            "bash",
            &format!("git log --oneline -3 -- {src}"),
            "1a2b3c4 feat: initial",
            0,
        );
        b.bash("bash", &format!("rg -n 'ack\\(' {src}"), "", 1);
        let decision = format!("I'll move {c} to the bus with an idempotency key instead of relying on the queue's exactly-once delivery.");
        b.say(&decision);
        last_decision = decision;
        b.call(
            None,
            "edit",
            json!({"path": src, "edits": [{"oldText": "legacyQueue", "newText": "bus"}]}),
            "Successfully replaced 1 block(s).",
            false,
        );
        let cmd = format!("npm test -- {test}");
        if k % 3 == 1 {
            b.bash("bash", &cmd, &format!("FAIL {test}\n  ● {c} › acks after publish\n    TypeError: bus.ack is not a function\n      at handle ({src}:{}:9)", 20 + k), 1);
            b.say("The bus has no ack; I'll acknowledge through the delivery handle instead.");
            b.call(
                None,
                "edit",
                json!({"path": src, "edits": [{"oldText": "bus.ack", "newText": "delivery.ack"}]}),
                "Successfully replaced 1 block(s).",
                false,
            );
        }
        b.bash(
            "bash",
            &cmd,
            &format!("PASS {test}\nTests: {} passed", 5 + rng.below(9)),
            0,
        );
        last_commit = format!("refactor(notify): move the {c} consumer to the event bus");
        b.bash(
            "bash",
            &format!("git commit -am \"{last_commit}\""),
            &format!("[main {:07x}] {last_commit}", rng.next() & 0xfff_ffff),
            0,
        );
        for p in 0..2 + rng.below(3) {
            b.bash(
                "bash",
                &format!(
                    "sleep {} && kubectl -n notify get pods -l app={c}",
                    10 * (p + 1)
                ),
                &format!("{c}-7d9f  1/1  Running  0  {}s", 30 * (p + 1)),
                0,
            );
        }
    }
    // The last span leaves a failure open.
    b.bash("bash", "npm run e2e -- notify", "FAIL e2e/notify.spec.ts\n  Error: Timed out waiting for the pager consumer to publish after 30000ms", 1);
    b.say("The end-to-end run times out on the pager consumer; next I will check its bus subscription.");
    b.user("ok");
    let probes = vec![
        inside("goal", "legacy queue to the event bus"),
        inside("constraints", "Never delete messages from the legacy queue"),
        fact(&last_commit),
        inside("decisions", &last_decision),
        inside("blocked", "Timed out waiting for the pager consumer"),
        fact("bus subscription"),
        Probe::Stale("bus.ack is not a function".into()),
        Probe::NotIn("goal".into(), "HEARTBEAT_OK".into()),
    ];
    script(
        format!("gen-mixed-long-{seed}"),
        "A long mixed session compacted ten times",
        b,
        probes,
    )
}

/// A harness with capitalised tool names (`Bash`, `Read`, `Grep`, `Glob`, `Edit`, `Write`,
/// `TodoWrite`): reminders appended to the user's own text rather than sent alone, hook output
/// as user texts, a rate-limited model call retried, a long stack trace.
fn capitalized_harness(seed: u64) -> Script {
    let mut rng = Rng(seed * 32_452_843);
    let mut b = Builder::new();
    let request = "The CSV export times out for accounts with more than 50k rows. Stream the export instead of building it in memory, and keep the column order identical.";
    b.user(&format!("{request}\n\n<system-reminder>\nAs you answer the user's questions, you can use the following context: the project uses Python 3.12 and Django 5. Do not mention this reminder.\n</system-reminder>"));
    b.call(
        None,
        "TodoWrite",
        json!({"todos": [
            {"content": "Find the export view", "status": "in_progress"},
            {"content": "Stream rows with a generator", "status": "pending"},
            {"content": "Add a test with 60k rows", "status": "pending"}
        ]}),
        "Todos have been modified successfully.",
        false,
    );
    for k in 0..(4 + rng.below(3)) {
        b.call(
            None,
            "Grep",
            json!({"pattern": format!("def export_{k}"), "path": "apps"}),
            &format!(
                "apps/reports/views.py:{}: def export_csv(request):",
                100 + k
            ),
            false,
        );
        b.call(
            None,
            "Glob",
            json!({"pattern": "apps/**/export*.py"}),
            "apps/reports/export.py",
            false,
        );
        b.call(
            None,
            "Read",
            json!({"file_path": "apps/reports/views.py"}),
            "def export_csv(request):\n    rows = list(qs)\n",
            false,
        );
        b.user(&format!(
            "PostToolUse:Read hook succeeded: checked {} files in {}ms",
            3 + k,
            40 + rng.below(60)
        ));
    }
    b.call(Some("The view builds the whole list in memory. I'll use StreamingHttpResponse with a generator instead of HttpResponse, so memory stays flat."), "Edit", json!({"file_path": "apps/reports/views.py", "old_string": "rows = list(qs)", "new_string": "rows = qs.iterator(chunk_size=2000)"}), "The file apps/reports/views.py has been updated.", false);
    let mut m = assistant(vec![], b.ts);
    m["stopReason"] = json!("error");
    m["errorMessage"] = json!("429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"This request would exceed the rate limit for your organization of 40,000 input tokens per minute.\"}}");
    b.push(m);
    b.say("Retrying after the rate limit.");
    let trace: String = (0..40)
        .map(|i| format!("  File \"/app/.venv/lib/python3.12/site-packages/django/core/handlers/base.py\", line {}, in _get_response", 100 + i))
        .collect::<Vec<_>>()
        .join("\n");
    b.bash("Bash", "python manage.py test apps.reports", &format!("Traceback (most recent call last):\n{trace}\nAssertionError: 'id,name,total' != 'name,id,total'\nFAILED (failures=1)"), 1);
    b.call(Some("The header order changed; I'll build the header from the same column list as before."), "Edit", json!({"file_path": "apps/reports/views.py", "old_string": "header = sorted(cols)", "new_string": "header = cols"}), "The file apps/reports/views.py has been updated.", false);
    b.bash(
        "Bash",
        "python manage.py test apps.reports",
        "Ran 12 tests in 3.1s\n\nOK",
        0,
    );
    b.call(None, "Write", json!({"file_path": "apps/reports/tests/test_export_stream.py", "content": "def test_60k(): ..."}), "File created successfully", false);
    b.bash(
        "Bash",
        "git status --short",
        " M apps/reports/views.py\n?? apps/reports/tests/test_export_stream.py",
        0,
    );
    b.bash(
        "Bash",
        "git diff --stat",
        " apps/reports/views.py | 12 ++++++------",
        0,
    );
    b.say("The export streams now and keeps the column order; the 60k-row test passes. Next I will measure the export time on the staging copy.");
    b.user("ok");
    let probes = vec![
        inside("goal", "Stream the export"),
        fact("keep the column order identical"),
        inside("decisions", "StreamingHttpResponse"),
        fact("apps/reports/views.py"),
        fact("test_export_stream.py"),
        fact("staging copy"),
        Probe::Stale("'id,name,total' != 'name,id,total'".into()),
        Probe::NotIn("goal".into(), "system-reminder || PostToolUse".into()),
    ];
    script(
        format!("gen-capitalized-harness-{seed}"),
        "A harness with capitalised tool names, appended reminders and hook output",
        b,
        probes,
    )
}
