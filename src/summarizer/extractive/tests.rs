//! Unit tests of the extractive summarizer.

use super::*;
use crate::json::utf16_len;
use serde_json::json;

use crate::compaction::prompts::HISTORY_HEADINGS as HEADINGS;

/// The quality bench's precision lint (noise items by kind), shared so that its own tests run
/// here and the summarizer's tests can assert a summary is clean.
#[path = "../../../benches/precision/mod.rs"]
mod precision;
const TP_HEADINGS: [&str; 3] = [
    "## Original Request",
    "## Early Progress",
    "## Context for Suffix",
];

/// The lines that are exactly a heading, in order.
fn headings_of(s: &str) -> Vec<&str> {
    s.lines().filter(|l| l.starts_with('#')).collect()
}

fn assert_well_formed(s: &str, expected: &[&str], max_tokens: u64) {
    assert_eq!(headings_of(s), expected, "headings in:\n{s}");
    assert!(
        utf16_len(s) <= budget_units(max_tokens),
        "{} > {} in:\n{s}",
        utf16_len(s),
        budget_units(max_tokens)
    );
}

fn assistant(content: Value, stop: &str) -> Value {
    json!({"role": "assistant", "content": content, "api": "anthropic-messages",
           "provider": "anthropic", "model": "m", "stopReason": stop, "timestamp": 1})
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"type": "toolCall", "id": id, "name": name, "arguments": args})
}

fn result(id: &str, name: &str, text: &str, is_error: bool) -> Value {
    json!({"role": "toolResult", "toolCallId": id, "toolName": name,
           "content": [{"type": "text", "text": text}], "isError": is_error, "timestamp": 2})
}

fn session() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": "Add a --json flag to the `report` command. Please don't use unsafe code, and keep the output stable.", "timestamp": 0}),
        assistant(json!([
            {"type": "thinking", "thinking": "Look at the CLI first."},
            {"type": "text", "text": "I'll read the CLI module first."},
            call("c1", "read", json!({"path": "src/cli.rs"})),
        ]), "toolUse"),
        result("c1", "read", "pub fn report() {}", false),
        assistant(json!([
            {"type": "text", "text": "I'll use serde_json for the output instead of hand-written formatting."},
            call("c2", "edit", json!({"path": "src/cli.rs", "edits": [{"oldText": "a", "newText": "b"}]})),
            call("c3", "write", json!({"path": "src/report/json.rs", "content": "pub fn x() {}"})),
        ]), "toolUse"),
        result("c2", "edit", "Successfully replaced 1 block(s) in src/cli.rs.", false),
        result("c3", "write", "Successfully wrote 13 bytes to src/report/json.rs", false),
        assistant(json!([call("c4", "bash", json!({"command": "cargo test report"}))]), "toolUse"),
        result("c4", "bash", "error[E0425]: cannot find value `fmt` in this scope\n --> src/report/json.rs:3:5\n\nCommand exited with code 1", true),
        json!({"role": "bashExecution", "command": "cargo build", "output": "error: could not compile `report`", "exitCode": 101, "cancelled": false, "truncated": false, "timestamp": 3}),
        assistant(json!([
            {"type": "text", "text": "The build fails because `fmt` is missing; fixing the import."},
            call("c5", "edit", json!({"path": "src/report/json.rs", "edits": []})),
        ]), "toolUse"),
        result("c5", "edit", "Successfully replaced 1 block(s) in src/report/json.rs.", false),
        assistant(json!([call("c6", "bash", json!({"command": "cargo test report"}))]), "toolUse"),
        result("c6", "bash", "test result: ok. 4 passed", false),
        assistant(json!([{"type": "text", "text": "All report tests pass. Next I will add a snapshot test for the JSON output."}]), "stop"),
    ]
}

fn input<'a>(
    messages: &'a [Value],
    _read: &'a [String],
    _modified: &'a [String],
    max_tokens: u64,
) -> ExtractiveInput<'a> {
    ExtractiveInput {
        messages: messages.into(),
        previous_summary: None,
        custom_instructions: None,
        turn_prefix: Messages::Parsed(&[]),
        max_tokens,
        settings: ExtractiveSettings::DEFAULT,
    }
}

#[test]
fn realistic_session() {
    let msgs = session();
    let read: Vec<String> = vec![];
    let modified = vec!["src/cli.rs".to_string(), "src/report/json.rs".to_string()];
    let mut inp = input(&msgs, &read, &modified, 2000);
    inp.custom_instructions = Some("the JSON schema");
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 2000);
    assert!(
        s.contains("Add a --json flag to the `report` command."),
        "{s}"
    );
    assert!(s.contains("Please don't use unsafe code"), "{s}");
    assert!(
        s.contains("`src/cli.rs`") && s.contains("`src/report/json.rs`"),
        "{s}"
    );
    assert!(
        s.contains("error[E0425]: cannot find value `fmt` in this scope"),
        "{s}"
    );
    assert!(
        s.contains("Command `cargo test report` → exit 1, ok"),
        "{s}"
    );
    assert!(s.contains("Command `cargo build` → exit 101"), "{s}");
    assert!(
        s.contains("Focus requested for this summary: the JSON schema"),
        "{s}"
    );
    assert!(s.contains("I'll use serde_json"), "{s}");
    assert!(s.contains("Next I will add a snapshot test"), "{s}");
    // The failed test run was fixed later; the build failure was not.
    let blocked = section(&s, "### Blocked");
    assert!(blocked.contains("cargo build"), "{blocked}");
    assert!(!blocked.contains("cargo test"), "{blocked}");
    let done = section(&s, "### Done");
    assert!(done.contains("- [x] Edited `src/cli.rs`"), "{done}");
    assert!(
        done.contains("Wrote and edited `src/report/json.rs`"),
        "{done}"
    );
    assert!(
        done.contains("Ran `cargo test report` successfully (after earlier failures)"),
        "{done}"
    );
}

/// The body under `heading` up to the next heading line.
fn section<'s>(s: &'s str, heading: &str) -> &'s str {
    let start = s
        .find(&format!("{heading}\n"))
        .map(|i| i + heading.len() + 1)
        .unwrap_or(0);
    let rest = &s[start..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn tight_budget_keeps_headings_and_latest_request() {
    let msgs = session();
    let modified = vec!["src/cli.rs".to_string()];
    for max_tokens in [0u64, 10, 49, 50, 60, 80, 120, 200, 400] {
        let s = summarize_history(&input(&msgs, &[], &modified, max_tokens));
        assert_eq!(headings_of(&s), HEADINGS, "{max_tokens}: {s}");
        let skeleton_fits = utf16_len(&s) <= budget_units(max_tokens);
        if max_tokens >= 60 {
            assert!(skeleton_fits, "{max_tokens}: {s}");
        }
        if max_tokens >= 120 {
            assert!(s.contains("Add a --json flag"), "{max_tokens}: {s}");
        }
    }
}

#[test]
fn update_mode_merges_previous_sections() {
    let msgs = session();
    let previous = "## Goal\nSet up the CLI skeleton.\n\n## Constraints & Preferences\n- Keep MSRV 1.80\n\n## Progress\n### Done\n- [x] Created `src/main.rs`\n\n### In Progress\n- [ ] Wiring subcommands\n\n### Blocked\n- (none)\n\n## Key Decisions\n- **clap derive**: less code\n\n## Next Steps\n1. Add the report command\n\n## Critical Context\n- Config lives in `~/.report.toml`\n\n<read-files>\nsrc/old.rs\n</read-files>";
    let mut inp = input(&msgs, &[], &[], 3000);
    inp.previous_summary = Some(previous);
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 3000);
    assert!(
        section(&s, "## Goal").contains("Set up the CLI skeleton."),
        "{s}"
    );
    assert!(
        section(&s, "## Goal").contains("(latest) Add a --json flag"),
        "{s}"
    );
    assert!(
        section(&s, "## Constraints & Preferences").contains("- Keep MSRV 1.80"),
        "{s}"
    );
    assert!(
        section(&s, "### Done").contains("- [x] Created `src/main.rs`"),
        "{s}"
    );
    assert!(
        section(&s, "### In Progress").contains("(earlier) Wiring subcommands"),
        "{s}"
    );
    assert!(
        section(&s, "## Key Decisions").contains("**clap derive**: less code"),
        "{s}"
    );
    // The span says what comes next itself: its statement replaces the earlier one.
    assert!(
        !section(&s, "## Next Steps").contains("Add the report command"),
        "{s}"
    );
    assert!(
        section(&s, "## Next Steps").contains("Next I will add a snapshot test"),
        "{s}"
    );
    assert!(s.contains("Config lives in `~/.report.toml`"), "{s}");
    assert!(
        !s.contains("src/old.rs"),
        "file blocks are recomputed, not merged: {s}"
    );
    // A span that says nothing of what comes next keeps the earlier next steps, after its own.
    let quiet = vec![
        user("Rename the report module."),
        assistant(
            json!([call("q1", "bash", json!({"command": "cargo check"}))]),
            "toolUse",
        ),
        result("q1", "bash", "Finished", false),
    ];
    let mut inp = input(&quiet, &[], &[], 3000);
    inp.previous_summary = Some(previous);
    let q = summarize_history(&inp);
    let next = section(&q, "## Next Steps");
    assert!(next.contains("(earlier) Add the report command"), "{q}");
    assert!(next.find("(earlier)") > next.find("Make sure"), "{next}");

    // Merging the output again does not duplicate or re-label items.
    let mut again = input(&[], &[], &[], 3000);
    again.previous_summary = Some(&s);
    let s2 = summarize_history(&again);
    assert_well_formed(&s2, &HEADINGS, 3000);
    assert_eq!(s2.matches("Set up the CLI skeleton.").count(), 1, "{s2}");
    assert!(!s2.contains("(earlier) (earlier)"), "{s2}");
    assert!(s2.contains("Keep MSRV 1.80"), "{s2}");
}

#[test]
fn unparseable_previous_summary_is_kept_verbatim() {
    let mut inp = input(&[], &[], &[], 1000);
    inp.previous_summary = Some("We were porting the parser to nom; tests in tests/parse.rs.");
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 1000);
    assert!(
        s.contains(
            "Earlier summary:\n  We were porting the parser to nom; tests in tests/parse.rs."
        ),
        "{s}"
    );
    inp.previous_summary = Some("No prior history.");
    let s = summarize_history(&inp);
    assert!(!s.contains("No prior history"), "{s}");
}

#[test]
fn turn_prefix() {
    let msgs = session();
    let s = summarize_turn_prefix(&msgs[..8], 1000, ExtractiveSettings::DEFAULT);
    assert_well_formed(&s, &TP_HEADINGS, 1000);
    assert!(
        section(&s, "## Original Request").contains("Add a --json flag"),
        "{s}"
    );
    let early = section(&s, "## Early Progress");
    assert!(early.contains("Edited `src/cli.rs`"), "{s}");
    assert!(
        early.contains("`cargo test report` failed (exit code 1)"),
        "{s}"
    );
    let ctx = section(&s, "## Context for Suffix");
    assert!(
        ctx.contains("Modified: `src/cli.rs`, `src/report/json.rs`"),
        "{s}"
    );
    assert!(
        ctx.contains("Constraint: Please don't use unsafe code"),
        "{s}"
    );
    assert!(ctx.contains("error[E0425]"), "{s}");
    // A call whose result is in the suffix is pending.
    let s = summarize_turn_prefix(&msgs[..7], 1000, ExtractiveSettings::DEFAULT);
    assert!(s.contains("Pending `cargo test report`"), "{s}");
}

#[test]
fn empty_input() {
    let s = summarize_history(&input(&[], &[], &[], 1000));
    assert_eq!(
        s,
        "## Goal\n(none)\n\n## Constraints & Preferences\n(none)\n\n## Progress\n### Done\n(none)\n\n### In Progress\n(none)\n\n### Blocked\n(none)\n\n## Key Decisions\n(none)\n\n## Next Steps\n(none)\n\n## Critical Context\n(none)"
    );
    let t = summarize_turn_prefix(&[], 1000, ExtractiveSettings::DEFAULT);
    assert_eq!(
        t,
        "## Original Request\n(none)\n\n## Early Progress\n(none)\n\n## Context for Suffix\n(none)"
    );
    assert_eq!(
        summarize_turn_prefix(&[], 0, ExtractiveSettings::DEFAULT),
        "## Original Request\n\n## Early Progress\n\n## Context for Suffix"
    );
}

#[test]
fn deterministic() {
    let msgs = session();
    let modified = vec!["src/cli.rs".to_string()];
    let a = summarize_history(&input(&msgs, &[], &modified, 700));
    let b = summarize_history(&input(&msgs, &[], &modified, 700));
    assert_eq!(a, b);
    assert_eq!(
        summarize_turn_prefix(&msgs, 300, ExtractiveSettings::DEFAULT),
        summarize_turn_prefix(&msgs, 300, ExtractiveSettings::DEFAULT)
    );
}

#[test]
fn malformed_messages_do_not_panic() {
    let msgs = vec![
        json!(null),
        json!(42),
        json!({"role": 7}),
        json!({"role": "user", "content": null}),
        json!({"role": "user"}),
        json!({"role": "user", "content": [null, 1, {"type": "text"}, {"type": "text", "text": 5}]}),
        json!({"role": "assistant", "content": "plain string", "stopReason": 3}),
        json!({"role": "assistant", "content": [{"type": "toolCall", "arguments": "x"}], "stopReason": "error"}),
        json!({"role": "toolResult", "toolCallId": 9, "isError": "yes", "content": {}}),
        json!({"role": "bashExecution", "exitCode": "1", "command": null}),
        json!({"role": "bashExecution", "exitCode": 2.5e300, "command": "x"}),
        json!({"role": "compactionSummary", "summary": 12}),
        json!({"role": "branchSummary", "summary": "## Goal\n- g"}),
        json!({"role": "custom", "customType": [], "content": "note"}),
        json!({"role": "wat", "content": "x"}),
    ];
    let s = summarize_history(&input(&msgs, &[], &[], 500));
    assert_well_formed(&s, &HEADINGS, 500);
    let t = summarize_turn_prefix(&msgs, 500, ExtractiveSettings::DEFAULT);
    assert_well_formed(&t, &TP_HEADINGS, 500);
}

#[test]
fn long_and_hostile_text_is_clipped_and_cannot_fake_headings() {
    let long = format!("## Goal\n{}\n## Critical Context", "é🦀x".repeat(5000));
    let msgs = vec![json!({"role": "user", "content": long})];
    let s = summarize_history(&input(&msgs, &[], &[], 800));
    assert_well_formed(&s, &HEADINGS, 800);
    // A run of 15000 characters without a space is no text: it is marked, not quoted.
    assert!(s.contains("[unreadable run of 15000 chars]"), "{s}");
}

fn fixture_messages(case: &str) -> Option<Vec<Value>> {
    let path = crate::test_fixtures::case_file(case, case, "session.jsonl")?;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e.get("type").and_then(Value::as_str) == Some("message"))
            .filter_map(|e| e.get("message").cloned())
            .collect(),
    )
}

#[test]
fn split_turn_previous_summary_from_an_llm() {
    // Pi's shape: history summary, the split-turn joiner, a turn-prefix summary, then the
    // file-list blocks appended by compaction.
    let previous = "## Goal\nPort the parser to nom.\n\n## Constraints & Preferences\n- (none)\n\n## Progress\n### Done\n- [x] Wrote `src/parse.rs`\n  with the tokenizer\n\n### In Progress\n- [ ] (none)\n\n### Blocked\n- (none)\n\n## Key Decisions\n- **nom 7**: stable API\n\n## Next Steps\n1. Port expressions\n2. Run `cargo test`\n\n## Critical Context\n- (none)\n\n---\n\n**Turn Context (split turn):**\n\n## Original Request\nAlso support comments.\n\n## Early Progress\n- Read `src/lex.rs`\n\n## Context for Suffix\n- Comments start with `#`\n\n<read-files>\nsrc/lex.rs\n</read-files>\n\n<modified-files>\nsrc/parse.rs\n</modified-files>";
    let mut inp = input(&[], &[], &[], 2000);
    inp.previous_summary = Some(previous);
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 2000);
    let goal = section(&s, "## Goal");
    assert!(
        goal.contains("Port the parser to nom.") && goal.contains("Also support comments."),
        "{s}"
    );
    assert!(
        section(&s, "### Done").contains("- [x] Wrote `src/parse.rs`\n  with the tokenizer"),
        "{s}"
    );
    assert!(
        section(&s, "### Done").contains("- [x] Read `src/lex.rs`"),
        "{s}"
    );
    // The split turn's request was the latest one; nothing newer came.
    assert!(
        section(&s, "## Next Steps").contains(
            "1. Make sure the latest user request is fully handled: Also support comments."
        ),
        "{s}"
    );
    assert!(
        section(&s, "## Next Steps").contains("3. (earlier) Run `cargo test`"),
        "{s}"
    );
    assert!(
        section(&s, "## Goal").contains("(latest) Also support comments."),
        "{s}"
    );
    assert!(
        section(&s, "## Critical Context").contains("- Comments start with `#`"),
        "{s}"
    );
    assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
    assert!(
        !s.contains("<read-files>") && !s.contains("Turn Context"),
        "{s}"
    );
}

#[test]
fn real_fixture_sessions() {
    for case in [
        "006-tool-heavy-file-ops",
        "009-bash-executions",
        "013-error-and-aborted-usage",
        "010-custom-messages",
    ] {
        let Some(msgs) = fixture_messages(case) else {
            continue;
        };
        let a = Analysis::of((&msgs).into());
        let (read, modified) = a.file_lists();
        for max_tokens in [100u64, 1000, 13_107] {
            let s = summarize_history(&input(&msgs, &read, &modified, max_tokens));
            assert_well_formed(&s, &HEADINGS, max_tokens);
            if max_tokens >= 1000 {
                assert!(!section(&s, "## Goal").starts_with("(none)"), "{case}: {s}");
            }
            let t = summarize_turn_prefix(&msgs, max_tokens, ExtractiveSettings::DEFAULT);
            assert_well_formed(&t, &TP_HEADINGS, max_tokens);
        }
        let big = summarize_history(&input(&msgs, &read, &modified, 13_107));
        if let Some(p) = modified.first() {
            assert!(big.contains(p.as_str()), "{case}: {big}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Extractive v2: resolution tracking, tools by arguments, goal selection, layout hygiene
// ---------------------------------------------------------------------------------------------

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text, "timestamp": 0})
}

fn said(text: &str) -> Value {
    assistant(json!([{"type": "text", "text": text}]), "stop")
}

fn summary_of(msgs: &[Value]) -> String {
    let s = summarize_history(&input(msgs, &[], &[], 4000));
    assert_well_formed(&s, &HEADINGS, 4000);
    s
}

#[test]
fn an_error_fixed_by_a_later_run_is_not_open() {
    let msgs = vec![
        user("Add spans to the lexer tokens."),
        assistant(
            json!([call(
                "c1",
                "bash",
                json!({"command": "cargo build -p lexer"})
            )]),
            "toolUse",
        ),
        result(
            "c1",
            "bash",
            "error[E0599]: no method named `with_span` found\nCommand exited with code 101",
            true,
        ),
        assistant(
            json!([call(
                "c2",
                "edit",
                json!({"path": "src/lib.rs", "edits": []})
            )]),
            "toolUse",
        ),
        result(
            "c2",
            "edit",
            "Successfully replaced 1 block(s) in src/lib.rs.",
            false,
        ),
        assistant(
            json!([call(
                "c3",
                "bash",
                json!({"command": "cargo build -p lexer"})
            )]),
            "toolUse",
        ),
        result("c3", "bash", "Finished", false),
        said("Builds now."),
    ];
    let s = summary_of(&msgs);
    assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
    assert!(!section(&s, "## Next Steps").contains("E0599"), "{s}");
    assert!(s.contains("later fixed"), "{s}");
}

#[test]
fn a_message_saying_fixed_closes_the_error_it_names() {
    let msgs = vec![
        user("Make the lint job green."),
        assistant(
            json!([call(
                "c1",
                "bash",
                json!({"command": "eslint src/api/client.ts"})
            )]),
            "toolUse",
        ),
        result(
            "c1",
            "bash",
            "14:7 error 'retries' is never used\nCommand exited with code 1",
            true,
        ),
        said("The unused variable in src/api/client.ts is fixed now; CI will rerun eslint."),
    ];
    let s = summary_of(&msgs);
    assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
    // A negated report closes nothing.
    let mut open = msgs.clone();
    open[3] = said("The error in src/api/client.ts is still not fixed.");
    let s = summary_of(&open);
    assert!(section(&s, "### Blocked").contains("eslint"), "{s}");
}

#[test]
fn an_abandoned_approach_is_a_decision_and_not_open() {
    let msgs = vec![
        user("Migrate the shop schema from MySQL to Postgres."),
        assistant(json!([call("c1", "bash", json!({"command": "pgloader mysql://ro@db/shop postgresql://app@pg/shop"}))]), "toolUse"),
        result("c1", "bash", "ERROR mysql: you need (at least one of) the SUPER privilege(s)\nCommand exited with code 1", true),
        said("pgloader needs SUPER on the source, which we do not have. Abandoning pgloader; I'll translate the DDL by hand."),
    ];
    let s = summary_of(&msgs);
    assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
    assert!(!section(&s, "## Next Steps").contains("pgloader"), "{s}");
    let decisions = section(&s, "## Key Decisions");
    assert!(
        decisions.contains(
            "pgloader needs SUPER on the source, which we do not have. Abandoning pgloader;"
        ),
        "{s}"
    );
    assert!(s.contains("approach abandoned"), "{s}");
}

#[test]
fn a_reasoned_choice_is_a_decision_and_a_consequence_is_not() {
    let msgs = vec![
        user("Prepare the 3.0 release notes."),
        said("Removing the v1 endpoints (#512) is breaking, so it gets a migration note."),
        said("The cache is cold after the deploy, so it will take a minute to warm up."),
    ];
    let s = summary_of(&msgs);
    let decisions = section(&s, "## Key Decisions");
    assert!(decisions.contains("#512"), "{s}");
    assert!(!decisions.contains("cache is cold"), "{s}");
}

#[test]
fn shell_tools_are_recognised_by_their_arguments() {
    let msgs = vec![
        user("Fix the status command."),
        assistant(
            json!([
                call(
                    "c1",
                    "exec",
                    json!({"command": "npx vitest run test/status.test.ts"})
                ),
                call("c2", "shell", json!({"cmd": "python -m pytest -q"})),
                call(
                    "c3",
                    "run_terminal_cmd",
                    json!({"command": "pnpm exec tsc --noEmit", "is_background": false})
                ),
                call(
                    "c4",
                    "execute_command",
                    json!({"command": "npm test -- login"})
                ),
                call(
                    "c5",
                    "container.exec",
                    json!({"cmd": ["bash", "-lc", "make check"]})
                ),
            ]),
            "toolUse",
        ),
        result(
            "c1",
            "exec",
            "FAIL test/status.test.ts\nTypeError: Cannot read properties of null",
            true,
        ),
        result("c2", "shell", "2 passed", false),
        result("c3", "run_terminal_cmd", "", false),
        result("c4", "execute_command", "Tests: 6 passed", false),
        result("c5", "container.exec", "ok", false),
        said("One failure left."),
    ];
    let s = summary_of(&msgs);
    for cmd in [
        "Command `python -m pytest -q` → ok",
        "Command `pnpm exec tsc --noEmit` → ok",
        "Command `npm test -- login` → ok",
        "Command `bash -lc make check` → ok",
    ] {
        assert!(s.contains(cmd), "{cmd} in {s}");
    }
    assert!(
        section(&s, "### Blocked").contains("`npx vitest run test/status.test.ts` failed"),
        "{s}"
    );
}

#[test]
fn other_file_tools_and_mcp_tools_are_summarised() {
    let msgs = vec![
        user("File tickets for the unowned regressions."),
        assistant(
            json!([
                call(
                    "c1",
                    "write_to_file",
                    json!({"path": "src/middleware/rateLimit.js", "content": "x"})
                ),
                call(
                    "c2",
                    "linear__create_issue",
                    json!({"team": "WEB", "title": "Login loop on Safari", "priority": 2})
                ),
                call(
                    "c3",
                    "github__add_comment",
                    json!({"issue_number": 821, "body": "Tracked"})
                ),
            ]),
            "toolUse",
        ),
        result("c1", "write_to_file", "File written successfully.", false),
        result("c2", "linear__create_issue", "{\"id\": \"WEB-431\"}", false),
        result(
            "c3",
            "github__add_comment",
            "MCP error -32603: secondary rate limit exceeded",
            true,
        ),
        said("Retrying the comment later."),
    ];
    let s = summary_of(&msgs);
    let done = section(&s, "### Done");
    assert!(done.contains("Wrote `src/middleware/rateLimit.js`"), "{s}");
    assert!(
        done.contains(
            "Called `linear__create_issue` (title: Login loop on Safari) → {\"id\": \"WEB-431\"}"
        ),
        "{s}"
    );
    assert!(
        section(&s, "### Blocked").contains("tool `github__add_comment` failed"),
        "{s}"
    );
}

#[test]
fn the_goal_skips_greetings_acknowledgements_and_repeated_boilerplate() {
    let boiler = "/new\nA new session was started. Greet the user in your configured persona.";
    let msgs = vec![
        user(boiler),
        said("Hey!"),
        user("hi"),
        said("Hi! What are we working on?"),
        user("set up a nightly backup of the postgres database to the bucket acme-backups"),
        said("Sure."),
        user("oke"),
        user(boiler),
        said("Hello again."),
        user("yes please"),
    ];
    let s = summary_of(&msgs);
    let goal = section(&s, "## Goal");
    assert!(goal.contains("set up a nightly backup"), "{s}");
    for noise in ["Greet the user", "oke", "hi\n", "yes please"] {
        assert!(!goal.contains(noise), "{noise:?} in the goal: {s}");
    }
    assert_eq!(
        s.matches("Greet the user").count(),
        1,
        "boilerplate stated once: {s}"
    );
    assert!(s.contains("Latest user reply: yes please"), "{s}");
    assert!(
        !s.contains("(latest)"),
        "a single request needs no label: {s}"
    );
}

#[test]
fn an_injected_prompt_is_stated_once() {
    let prompt = "You write release notes. Never mention internal ticket numbers.";
    let note = json!({"role": "custom", "customType": "skill", "content": prompt, "display": true, "timestamp": 1});
    let msgs = vec![
        note.clone(),
        user("Write the notes for v2.4.0."),
        note,
        said("Drafted."),
    ];
    let s = summary_of(&msgs);
    assert_eq!(
        s.matches("Never mention internal ticket numbers").count(),
        1,
        "{s}"
    );
    assert!(s.contains("sent 2×"), "{s}");
}

#[test]
fn listings_are_not_progress_and_errors_are_labelled_apart() {
    let msgs = vec![
        user("Raise the upload limit and fix CI."),
        assistant(
            json!([
                call("c1", "bash", json!({"command": "ls src"})),
                call(
                    "c2",
                    "bash",
                    json!({"command": "find . -name '*.rs' | head"})
                ),
                call("c3", "bash", json!({"command": "npm run lint"})),
                call("c4", "bash", json!({"command": "npm run test:integration"})),
            ]),
            "toolUse",
        ),
        result("c1", "bash", "main.rs", false),
        result("c2", "bash", "./src/main.rs", false),
        result("c3", "bash", "lint error\nCommand exited with code 1", true),
        result("c4", "bash", "Timeout\nCommand exited with code 1", true),
        said("Two failures."),
    ];
    let s = summary_of(&msgs);
    assert!(!section(&s, "### Done").contains("ls src"), "{s}");
    assert!(!s.contains("Command `ls src`"), "{s}");
    assert_eq!(s.matches("Last error from").count(), 1, "{s}");
    assert!(
        s.contains("Last error from `npm run test:integration`"),
        "{s}"
    );
    assert!(s.contains("Earlier error from `npm run lint`"), "{s}");
}

#[test]
fn todo_lists_fill_done_and_in_progress() {
    let msgs = vec![
        user("Set up the monorepo tooling."),
        assistant(
            json!([call(
                "c1",
                "todo_write",
                json!({"todos": [
                    {"content": "Add turbo.json", "status": "completed"},
                    {"content": "Configure changesets", "status": "in_progress"}
                ]})
            )]),
            "toolUse",
        ),
        result("c1", "todo_write", "Todos updated", false),
        said("Next: changesets."),
    ];
    let s = summary_of(&msgs);
    assert!(
        section(&s, "### Done").contains("- [x] Add turbo.json"),
        "{s}"
    );
    assert!(
        section(&s, "### In Progress").contains("- [ ] Configure changesets (in progress)"),
        "{s}"
    );
}

#[test]
fn clipping_never_cuts_inside_a_word() {
    assert_eq!(
        clip_head("alpha beta gamma delta", 13),
        "alpha beta […12 more chars]"
    );
    assert_eq!(
        clip_tail("alpha beta gamma delta", 9),
        "[…17 earlier chars] delta"
    );
    // One giant token has no boundary: it is cut.
    assert!(clip_head(&"x".repeat(50), 10).starts_with("xxxxxxxxxx […"));
    let long = "I'll use sqlx instead of diesel because its compile-time checked queries work with our raw SQL migrations and it is async and it is maintained";
    let msgs = vec![user("Pick a DB layer."), said(long)];
    let s = summarize_history(&input(&msgs, &[], &[], 100));
    for line in s.lines().filter(|l| l.contains("more chars]")) {
        let before = line.split(" […").next().unwrap_or("");
        let last_word = before.rsplit(' ').next().unwrap_or("");
        assert!(
            long.contains(&format!("{last_word} ")),
            "cut word in {line:?}"
        );
    }
}

#[test]
fn a_turn_opened_by_an_injected_task_has_its_request() {
    let msgs = vec![
        json!({"role": "custom", "customType": "task-queue", "content": "Task #77: rotate the TLS certificate of the staging ingress.", "display": true, "timestamp": 1}),
        assistant(
            json!([call(
                "c1",
                "bash",
                json!({"command": "kubectl -n web-staging get certificate"})
            )]),
            "toolUse",
        ),
        result("c1", "bash", "staging-tls False", false),
    ];
    let s = summarize_turn_prefix(&msgs, 1000, ExtractiveSettings::DEFAULT);
    assert_well_formed(&s, &TP_HEADINGS, 1000);
    assert!(
        section(&s, "## Original Request")
            .contains("(from task-queue) Task #77: rotate the TLS certificate"),
        "{s}"
    );
}

#[test]
fn a_blocker_carried_over_is_settled_by_a_later_success() {
    let previous = "## Goal\n- Build logq.\n\n## Constraints & Preferences\n(none)\n\n## Progress\n### Done\n(none)\n\n### In Progress\n- [ ] Last assistant message: One range test fails.\n\n### Blocked\n- `cargo test range` failed (exit code 101): assertion failed …\n\n## Key Decisions\n(none)\n\n## Next Steps\n1. Fix the failure of `cargo test range`: assertion failed …\n2. Make sure the latest user request is fully handled: Now --until.\n\n## Critical Context\n- Last error from `cargo test range` (exit code 101):\n  assertion failed";
    let msgs = vec![
        assistant(
            json!([call("c1", "bash", json!({"command": "cargo test range"}))]),
            "toolUse",
        ),
        result("c1", "bash", "test result: ok. 4 passed", false),
        said("Ranges work."),
        user("Add --count."),
    ];
    let mut inp = input(&msgs, &[], &[], 4000);
    inp.previous_summary = Some(previous);
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 4000);
    assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
    let next = section(&s, "## Next Steps");
    assert!(
        !next.contains("cargo test range") && !next.contains("Now --until"),
        "{s}"
    );
    assert!(
        !section(&s, "### In Progress").contains("One range test fails"),
        "{s}"
    );
    // Settled once: the error line says it was fixed (the blocker's "settled" line is about
    // the same failure, and the newer line stands for both).
    assert!(
        s.contains("Earlier error (fixed since) from `cargo test range`"),
        "{s}"
    );
    assert_eq!(s.matches("`cargo test range` failed").count(), 0, "{s}");
    assert!(!s.contains("Last error from `cargo test range`"), "{s}");
}

#[test]
fn a_large_cap_is_not_filled() {
    let mut msgs = vec![user("Refactor every module.")];
    for i in 0..300 {
        msgs.push(assistant(json!([
            {"type": "text", "text": format!("Module {i} next.")},
            call(&format!("c{i}"), "edit", json!({"path": format!("src/m{i}.rs"), "edits": []})),
            call(&format!("t{i}"), "bash", json!({"command": format!("cargo test -p m{i}")})),
        ]), "toolUse"));
        msgs.push(result(&format!("c{i}"), "edit", "ok", false));
        msgs.push(result(&format!("t{i}"), "bash", "test result: ok", false));
    }
    let s = summarize_history(&input(&msgs, &[], &[], 13_107));
    assert_well_formed(&s, &HEADINGS, 13_107);
    assert!(utf16_len(&s) <= target_units(13_107), "{}", utf16_len(&s));
    assert!(
        utf16_len(&s) <= budget_units(ExtractiveSettings::DEFAULT.target_tokens),
        "within the extractive target: {}",
        utf16_len(&s)
    );
    assert!(s.contains("Refactor every module."), "{s}");
}

// ---------------------------------------------------------------------------------------------
// Round two: re-runs, statements of fixes, plans, the latest request, hygiene, staying small
// ---------------------------------------------------------------------------------------------

fn bash_call(id: &str, command: &str) -> Value {
    assistant(
        json!([call(id, "bash", json!({ "command": command }))]),
        "toolUse",
    )
}

fn update(msgs: &[Value], previous: &str, target_tokens: u64) -> String {
    let mut inp = input(msgs, &[], &[], 13_107);
    inp.previous_summary = Some(previous);
    inp.settings = ExtractiveSettings { target_tokens };
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 13_107);
    s
}

#[test]
fn a_rerun_that_no_longer_shows_the_error_supersedes_it() {
    let cmd = "go test ./internal/httpapi/";
    let msgs = vec![
        user("Stop the metrics stream when the client goes away."),
        bash_call("c1", cmd),
        result("c1", "bash", "# example.com/svc/internal/httpapi\ninternal/httpapi/metrics.go:14:9: undefined: ctx\nCommand exited with code 1", true),
        bash_call("c2", cmd),
        result("c2", "bash", "--- FAIL: TestStreamStops (1.02s)\n    metrics_test.go:31: found unexpected goroutines\nCommand exited with code 1", true),
        said("The goroutine still leaks."),
    ];
    let s = summary_of(&msgs);
    let blocked = section(&s, "### Blocked");
    assert!(blocked.contains("found unexpected goroutines"), "{s}");
    assert!(!blocked.contains("undefined: ctx"), "{s}");
    assert!(
        !section(&s, "## Next Steps").contains("undefined: ctx"),
        "{s}"
    );
    assert!(s.contains("gone in a later run"), "{s}");

    // The same error again on the re-run: still open (line numbers may move).
    let mut same = msgs.clone();
    same[4] = result(
        "c2",
        "bash",
        "internal/httpapi/metrics.go:15:9: undefined: ctx\nCommand exited with code 1",
        true,
    );
    let s = summary_of(&same);
    assert!(section(&s, "### Blocked").contains("undefined: ctx"), "{s}");

    // A longer command may not run what failed: it supersedes nothing.
    let mut longer = msgs.clone();
    longer[3] = bash_call("c2", "go test ./internal/httpapi/ -run TestStreamStops");
    let s = summary_of(&longer);
    assert!(section(&s, "### Blocked").contains("undefined: ctx"), "{s}");

    // A blocker carried over from an earlier summary is superseded the same way.
    let previous = "## Goal\n- Stop the stream.\n\n## Progress\n### Blocked\n- `go test ./internal/httpapi/` failed (exit code 1): internal/httpapi/metrics.go:14:9: undefined: ctx\n\n## Next Steps\n1. Fix the failure of `go test ./internal/httpapi/`: internal/httpapi/metrics.go:14:9: undefined: ctx";
    let s = update(&msgs[3..], previous, 2000);
    assert!(
        !section(&s, "### Blocked").contains("undefined: ctx"),
        "{s}"
    );
    assert!(
        !section(&s, "## Next Steps").contains("undefined: ctx"),
        "{s}"
    );
}

#[test]
fn a_statement_that_it_is_fixed_closes_the_error_and_goes_under_done() {
    let msgs = vec![
        user("The deploy fails at migrate."),
        json!({"role": "bashExecution", "command": "python manage.py migrate", "output": "django.db.utils.OperationalError: no such column: orders_order.status", "exitCode": 1, "cancelled": false, "truncated": false, "timestamp": 3}),
        said("The OperationalError is fixed: nothing queries `Order` at import time any more, and I will now add `migrate --check` to CI."),
        user("thanks"),
    ];
    let s = summary_of(&msgs);
    assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
    let done = section(&s, "### Done");
    assert!(done.contains("The OperationalError is fixed"), "{s}");
    let next = section(&s, "## Next Steps");
    assert!(
        !next.contains("OperationalError"),
        "a fix is no next step: {s}"
    );
    assert!(
        next.contains("I will now add `migrate --check` to CI."),
        "{s}"
    );
    // "still" negates: the error stays open and nothing is done.
    let mut open = msgs.clone();
    open[2] = said("The OperationalError is still not fixed.");
    let s = summary_of(&open);
    assert!(
        section(&s, "### Blocked").contains("OperationalError"),
        "{s}"
    );
    assert!(!section(&s, "### Done").contains("OperationalError"), "{s}");
}

#[test]
fn plan_steps_are_done_by_results_and_statements_and_the_rest_is_left_in_order() {
    let msgs = vec![
        user("Add rate limiting. Plan:\n1. Write the limiter in `api/ratelimit.ts`\n2. Register it in `api/server.ts`\n3. Answer 429 with `Retry-After`\n4. Make the limits configurable\n5. Document the limits in `docs/api.md`"),
        assistant(json!([
            call("c1", "write", json!({"path": "api/ratelimit.ts", "content": "x"})),
            call("c2", "edit", json!({"path": "api/server.ts", "edits": []})),
        ]), "toolUse"),
        result("c1", "write", "Successfully wrote 9 bytes to api/ratelimit.ts", false),
        result("c2", "edit", "Successfully replaced 1 block(s) in api/server.ts.", false),
        said("Step 3 is done: an empty bucket answers 429 with `Retry-After`."),
        user("ok"),
    ];
    let s = summary_of(&msgs);
    let next = section(&s, "## Next Steps");
    assert!(
        next.contains("1. (plan step 4) Make the limits configurable"),
        "{s}"
    );
    assert!(
        next.contains("2. (plan step 5) Document the limits in `docs/api.md`"),
        "{s}"
    );
    for done in ["Write the limiter", "Register it in", "Answer 429"] {
        assert!(!next.contains(done), "{done} is done: {s}");
        assert_eq!(
            section(&s, "### Done").matches(done).count(),
            1,
            "{done} once: {s}"
        );
    }

    // The next compaction reads the steps left back, and its span finishes one of them.
    let later = vec![
        assistant(
            json!([call(
                "c3",
                "edit",
                json!({"path": "docs/api.md", "edits": []})
            )]),
            "toolUse",
        ),
        result(
            "c3",
            "edit",
            "Successfully replaced 1 block(s) in docs/api.md.",
            false,
        ),
        user("go on"),
    ];
    let s2 = update(&later, &s, 2000);
    let next = section(&s2, "## Next Steps");
    assert!(
        next.contains("(plan step 4) Make the limits configurable"),
        "{s2}"
    );
    assert!(!next.contains("Document the limits"), "{s2}");
    assert!(
        section(&s2, "### Done").contains("Document the limits in `docs/api.md`"),
        "{s2}"
    );

    // The latest statement of what is left wins over the plan.
    let restated = vec![
        said("What is left:\n- Load-test the limiter\n- Tune the burst size"),
        user("ok"),
    ];
    let s3 = update(&restated, &s, 2000);
    let next = section(&s3, "## Next Steps");
    assert!(next.contains("(plan step 1) Load-test the limiter"), "{s3}");
    assert!(next.contains("(plan step 2) Tune the burst size"), "{s3}");
    assert!(!next.contains("Make the limits configurable"), "{s3}");

    // A plain sentence naming a step's words finishes it ("Profiling is done").
    let bullets = vec![
        user("Speed up the nightly job."),
        said("Here is the plan:\n- Profile the job to find the slow stage\n- Replace the per-row upsert with COPY"),
        said("Profiling is done: the upsert takes 93% of the time."),
        user("ok"),
    ];
    let s4 = summary_of(&bullets);
    let next = section(&s4, "## Next Steps");
    assert!(!next.contains("Profile the job"), "{s4}");
    assert!(
        next.contains("(plan step 2) Replace the per-row upsert with COPY"),
        "{s4}"
    );
}

#[test]
fn plans_in_other_shapes() {
    // Checkboxes restated by the assistant: the ticked ones are done.
    let msgs = vec![
        user("Ship the release."),
        said(
            "Progress:\n- [x] Tag v1.4.0\n- [ ] Publish the crate\n- [ ] Announce it on the forum",
        ),
        user("ok"),
    ];
    let s = summary_of(&msgs);
    assert!(section(&s, "### Done").contains("Tag v1.4.0"), "{s}");
    let next = section(&s, "## Next Steps");
    assert!(next.contains("(plan step 2) Publish the crate"), "{s}");
    assert!(!next.contains("Tag v1.4.0"), "{s}");
    // A range of step numbers, with an en dash.
    let msgs = vec![
        user("Do it:\n1. Alpha\n2. Beta\n3. Gamma\n4. Delta"),
        said("Steps 1–3 are done."),
        user("ok"),
    ];
    let next = section(&summary_of(&msgs), "## Next Steps").to_string();
    assert!(
        next.contains("(plan step 4) Delta") && !next.contains("Beta"),
        "{next}"
    );
    // Steps to reproduce are no plan.
    let msgs = vec![
        user("The app crashes. Steps to reproduce:\n1. Open settings\n2. Tap export"),
        said("Looking."),
        user("ok"),
    ];
    assert!(!section(&summary_of(&msgs), "## Next Steps").contains("(plan"));
}

#[test]
fn the_latest_request_of_a_split_turn_is_in_its_prefix() {
    let history = vec![
        user("Add retries to the uploader."),
        bash_call("c1", "go test ./storage/"),
        result("c1", "bash", "ok", false),
        said("Retries are in."),
    ];
    let prefix = vec![
        user("Now switch to multipart uploads for files over 100 MB."),
        bash_call("c2", "go doc manager.Uploader"),
        result("c2", "bash", "type Uploader struct", false),
    ];
    let mut inp = input(&history, &[], &[], 4000);
    inp.turn_prefix = (&prefix).into();
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 4000);
    let next = section(&s, "## Next Steps");
    assert!(
        next.contains(
            "Make sure the latest user request is fully handled: Now switch to multipart uploads"
        ),
        "{s}"
    );
    assert!(!next.contains("Add retries"), "{s}");
    assert!(
        section(&s, "## Goal").contains("(latest) Now switch to multipart uploads"),
        "{s}"
    );
    assert!(
        section(&s, "## Goal").contains("(original request) Add retries"),
        "{s}"
    );
}

#[test]
fn slash_commands_are_not_goals_and_questions_are_not_constraints() {
    let msgs = vec![
        user("/model claude-sonnet-4-5"),
        user("Export dates as ISO 8601. You must keep the column order exactly as it is."),
        said("Done."),
        user("Should the audit export use UTC too? Can you check it?"),
        said("It already does."),
        user("/mode plan"),
    ];
    let s = summary_of(&msgs);
    let goal = section(&s, "## Goal");
    assert!(!goal.contains("/model") && !goal.contains("/mode"), "{s}");
    assert!(
        goal.contains("(latest) Should the audit export use UTC too?"),
        "{s}"
    );
    let constraints = section(&s, "## Constraints & Preferences");
    assert!(
        constraints.contains("You must keep the column order exactly as it is."),
        "{s}"
    );
    assert!(!constraints.contains("Should the audit export"), "{s}");
    assert!(!section(&s, "## Next Steps").contains("/mode"), "{s}");
    assert!(
        s.contains(
            "Slash commands the user ran (not requests): `/model claude-sonnet-4-5`, `/mode plan`"
        ),
        "{s}"
    );
    // A path is no slash command.
    assert!(!is_slash_command(
        "/etc/nginx/nginx.conf has a typo on line 3"
    ));
    assert!(is_question("should we bump the version"));
    assert!(!is_question("Do not touch the audit export."));
}

#[test]
fn work_the_assistant_reported_fills_done() {
    let msgs = vec![
        user("Rewrite the location block so long reports work."),
        said("I've rewritten the config: `/api/reports/` now has `proxy_read_timeout 300s`. Next I will look at the ingress."),
        user("thanks"),
    ];
    let s = summary_of(&msgs);
    let done = section(&s, "### Done");
    assert!(
        done.contains(
            "- [x] I've rewritten the config: `/api/reports/` now has `proxy_read_timeout 300s`."
        ),
        "{s}"
    );
    assert!(!done.contains("Next I will"), "{s}");
    // Without a report, Done says so.
    let quiet = vec![
        user("Rewrite the block."),
        said("Here is a draft."),
        user("thanks"),
    ];
    assert_eq!(section(&summary_of(&quiet), "### Done").trim(), "(none)");
}

#[test]
fn repeated_compactions_fold_repeated_items_with_a_count_and_a_range() {
    let mut summary = String::new();
    let mut sizes = Vec::new();
    for round in 0..10 {
        let mut msgs = vec![user(&format!("Task {round}: add the `--opt{round}` flag."))];
        for k in 0..3 {
            let id = format!("c{round}_{k}");
            msgs.push(assistant(
                json!([
                    call(
                        &format!("{id}e"),
                        "edit",
                        json!({"path": format!("src/f{round}_{k}.rs"), "edits": []})
                    ),
                    call(
                        &id,
                        "bash",
                        json!({"command": format!("cargo test opt{round}_{k}")})
                    ),
                ]),
                "toolUse",
            ));
            msgs.push(result(&format!("{id}e"), "edit", "ok", false));
            msgs.push(result(&id, "bash", "test result: ok", false));
        }
        msgs.push(said(&format!("The `--opt{round}` flag works now.")));
        summary = if round == 0 {
            summary_of(&msgs)
        } else {
            update(&msgs, &summary, 2000)
        };
        sizes.push(utf16_len(&summary));
    }
    let done = section(&summary, "### Done");
    // One line with a count and a range stands for the oldest runs, the newest stay verbatim.
    let folded = done
        .lines()
        .find(|l| l.starts_with("- [x] Earlier successful commands ("))
        .unwrap_or_else(|| panic!("no folded line in {summary}"));
    let count: usize = folded
        .trim_start_matches("- [x] Earlier successful commands (")
        .split(')')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(count >= 20, "{folded}");
    assert!(
        folded.contains("`cargo test opt0_0` … `cargo test opt"),
        "{folded}"
    );
    assert!(
        done.contains("Ran `cargo test opt9_2` successfully"),
        "{summary}"
    );
    assert!(done.lines().count() <= 16, "{summary}");
    // The goal is kept: the original and the latest request verbatim, the rest folded.
    let goal = section(&summary, "## Goal");
    assert!(
        goal.contains("(original request) Task 0: add the `--opt0` flag."),
        "{summary}"
    );
    assert!(
        goal.contains("(latest) Task 9: add the `--opt9` flag."),
        "{summary}"
    );
    assert!(goal.contains("Earlier requests ("), "{summary}");
    // Flat: the last summary is not much larger than the fourth.
    assert!(sizes[9] <= sizes[3] + sizes[3] / 4, "{sizes:?}");
}

#[test]
fn must_keep_facts_are_never_dropped_under_the_budget() {
    let mut msgs = vec![user("Harden the API server.")];
    for i in 0..40 {
        msgs.push(user(&format!("Rule {i}: never log the header X-Secret-{i}, and always keep the audit trail {i} intact.")));
        msgs.push(said(&format!(
            "I'll use middleware {i} instead of a proxy, because it sees the decoded body {i}."
        )));
        msgs.push(bash_call(
            &format!("c{i}"),
            &format!("cargo test audit_{i}"),
        ));
        msgs.push(result(&format!("c{i}"), "bash", "test result: ok", false));
    }
    msgs.push(bash_call("z", "cargo clippy"));
    msgs.push(result(
        "z",
        "bash",
        "error: this `if` has identical blocks\nCommand exited with code 101",
        true,
    ));
    msgs.push(user("go on"));
    let mut inp = input(&msgs, &[], &[], 13_107);
    inp.settings = ExtractiveSettings { target_tokens: 300 };
    let s = summarize_history(&inp);
    assert_well_formed(&s, &HEADINGS, 13_107);
    assert!(
        utf16_len(&s) > budget_units(300),
        "must-keep facts pass the target"
    );
    for i in 0..40 {
        assert!(
            s.contains(&format!("never log the header X-Secret-{i}")),
            "constraint {i}: {s}"
        );
        assert!(
            s.contains(&format!("I'll use middleware {i} instead")),
            "decision {i}: {s}"
        );
    }
    assert!(
        section(&s, "### Blocked").contains("identical blocks"),
        "{s}"
    );
    // The rules are constraints, not requests: the one request is the goal.
    assert!(
        section(&s, "## Goal").contains("Harden the API server."),
        "{s}"
    );
    // The rest competes for the target: few of the 40 test runs fit.
    assert!(s.matches("cargo test audit_").count() < 40, "{s}");
}

// ---------------------------------------------------------------------------------------------
// Round three (issue 36): a checkpoint a person accepts as a handoff. Each test plants one kind
// of noise the way published sessions produce it, and checks the summary with the quality
// bench's precision lint (no noise item of any kind) and for the fact that must stay.
// ---------------------------------------------------------------------------------------------

/// The noise items the precision lint finds, as "kind (section): item" lines.
fn noise(summary: &str) -> Vec<String> {
    precision::lint(summary)
        .into_iter()
        .map(|f| format!("{} ({}): {}", f.kind.name(), f.section, f.item))
        .collect()
}

fn custom(kind: &str, text: &str) -> Value {
    json!({"role": "custom", "customType": kind, "content": text, "display": true, "timestamp": 1})
}

fn bash_result(id: &str, output: &str, code: i64) -> Value {
    let text = if code == 0 {
        output.to_string()
    } else {
        format!("{output}\n\nCommand exited with code {code}")
    };
    result(id, "bash", &text, code != 0)
}

#[test]
fn a_note_resent_with_another_time_is_one_line_with_a_count_and_the_latest_text() {
    let mut msgs = vec![user("Keep the nightly report job healthy.")];
    for k in 0..12 {
        msgs.push(custom(
            "heartbeat",
            &format!(
                "Heartbeat: reply HEARTBEAT_OK if idle. Now 2026-03-05T10:{:02}:00Z.",
                k * 5
            ),
        ));
        msgs.push(said("HEARTBEAT_OK"));
    }
    let s = summary_of(&msgs);
    assert_eq!(s.matches("Heartbeat: reply").count(), 1, "{s}");
    assert!(s.contains("sent 12×"), "{s}");
    assert!(s.contains("10:55:00Z"), "the latest text: {s}");
    assert!(noise(&s).is_empty(), "{:?}\n{s}", noise(&s));
}

#[test]
fn user_texts_differing_only_in_their_time_are_boilerplate_even_one_per_compaction() {
    let beat = |t: &str| {
        user(&format!(
            "[heartbeat {t}] If nothing needs attention reply HEARTBEAT_OK, else continue."
        ))
    };
    let first = vec![
        user("Port the scheduler to tokio."),
        beat("09:00"),
        said("HEARTBEAT_OK"),
    ];
    let mut summary = summary_of(&first);
    for t in ["09:30", "10:00", "10:30"] {
        let msgs = vec![beat(t), said("Continuing the port.")];
        summary = update(&msgs, &summary, 2000);
    }
    let goal = section(&summary, "## Goal");
    assert!(goal.contains("Port the scheduler to tokio."), "{summary}");
    assert!(!goal.contains("HEARTBEAT_OK"), "{summary}");
    assert_eq!(
        summary.matches("HEARTBEAT_OK, else").count(),
        1,
        "{summary}"
    );
    assert!(summary.contains("sent 4×"), "{summary}");
    assert!(
        noise(&summary).is_empty(),
        "{:?}\n{summary}",
        noise(&summary)
    );
}

#[test]
fn a_poll_with_another_sleep_is_one_command_and_reads_as_looking() {
    let mut msgs = vec![user("Wait for the deploy to finish, then tag the release.")];
    for (k, sleep) in [30, 45, 60, 30, 90].iter().enumerate() {
        let id = format!("p{k}");
        msgs.push(bash_call(
            &id,
            &format!("sleep {sleep} && curl -s https://ci.example.com/api/deploy/42"),
        ));
        msgs.push(bash_result(&id, "{\"state\":\"running\"}", 0));
    }
    msgs.push(bash_call("t", "git tag v1.4.0 && git push origin v1.4.0"));
    msgs.push(bash_result("t", "", 0));
    let s = summary_of(&msgs);
    assert_eq!(
        s.matches("ci.example.com").count(),
        0,
        "a successful poll is no news: {s}"
    );
    assert!(
        s.contains("Explored without changing anything: 5 read-only calls"),
        "{s}"
    );
    assert!(section(&s, "### Done").contains("git tag v1.4.0"), "{s}");
    assert!(noise(&s).is_empty(), "{:?}\n{s}", noise(&s));

    // Failing polls of the same shape: one Critical Context line with every outcome.
    let mut msgs = vec![user("Wait for the migration job.")];
    for (k, sleep) in [10, 20, 30].iter().enumerate() {
        let id = format!("q{k}");
        msgs.push(bash_call(
            &id,
            &format!("sleep {sleep}; kubectl -n db logs job/migrate --tail 3 | grep -q done"),
        ));
        msgs.push(bash_result(&id, "", 1));
    }
    let s = summary_of(&msgs);
    assert_eq!(s.matches("Command `sleep").count(), 1, "{s}");
    assert!(s.contains("(and 2 more like it)"), "{s}");
}

#[test]
fn a_search_that_finds_nothing_is_not_blocked_and_exploration_is_one_line() {
    let msgs = vec![
        user("Remove the deprecated `legacy_auth` flag."),
        bash_call("a", "grep -rn legacy_auth src"),
        bash_result("a", "src/config.rs:12: legacy_auth: bool,", 0),
        bash_call("b", "rg -n 'legacy_auth|LegacyAuth' tests"),
        bash_result("b", "(no output)", 1),
        bash_call("c", "ls src"),
        bash_result("c", "config.rs\nmain.rs", 0),
        assistant(
            json!([call(
                "d",
                "grep",
                json!({"pattern": "legacy_auth", "path": "docs"})
            )]),
            "toolUse",
        ),
        result("d", "grep", "docs/flags.md:3: legacy_auth", false),
        bash_call("e", "git log --oneline -3 -- src/config.rs"),
        bash_result("e", "abc123 add flag", 0),
        assistant(
            json!([call(
                "f",
                "edit",
                json!({"path": "src/config.rs", "edits": []})
            )]),
            "toolUse",
        ),
        result("f", "edit", "ok", false),
        bash_call("g", "git commit -am 'remove legacy_auth'"),
        bash_result("g", "[main 1a2b3c4] remove legacy_auth", 0),
    ];
    let s = summary_of(&msgs);
    assert!(section(&s, "### Blocked").contains("(none)"), "{s}");
    let done = section(&s, "### Done");
    assert!(
        done.contains("Explored without changing anything: 5 read-only calls"),
        "{s}"
    );
    assert!(done.contains("Edited `src/config.rs`"), "{s}");
    assert!(done.contains("git commit -am 'remove legacy_auth'"), "{s}");
    assert!(!done.contains("Ran `grep"), "{s}");
    assert!(noise(&s).is_empty(), "{:?}\n{s}", noise(&s));

    // A search that fails for a reason is still a failure.
    let msgs = vec![
        user("Find the flag."),
        bash_call("a", "rg -n legacy_auth nope"),
        bash_result("a", "rg: nope: No such file or directory (os error 2)", 2),
    ];
    assert!(section(&summary_of(&msgs), "### Blocked").contains("No such file"));
}

#[test]
fn injected_notes_reports_and_outputs_are_bounded_and_never_pasted_whole() {
    let report = format!(
        "<task-notification>\n<task-id>bg_7</task-id>\n<summary>Agent \"Audit billing\" completed</summary>\n<result>\nFinding: InvoiceRepository.list_for_customer issues one query per line item.\n{}\n</result>\n</task-notification>",
        "- checked handlers/h.py: no loop over queries\n".repeat(60)
    );
    let minified = "function n(r){if(t[r])return t[r].exports;var o=t[r]={i:r,l:!1,exports:{}};return e[r].call(o.exports,o,o.exports,n),o.l=!0,o.exports}".repeat(8);
    let token =
        "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkwYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo".repeat(3);
    let msgs = vec![
        user("Audit the services for N+1 queries and fix the bundle build."),
        custom("workspace", &format!("Workspace files:\n{}", "notes/file.md\n".repeat(200))),
        user(&report),
        bash_call("b", "node dist/app.js"),
        bash_result("b", &format!("/app/dist/app.min.js:1\n{minified}\n\nSyntaxError: Unexpected token '<' in JSON at position 0\nsession={token}"), 1),
        // A long command with a long error line: the line still fits.
        bash_call("c", &format!("docker run --rm -e {} acme/bundler:latest build", "FLAG=on -e ".repeat(20))),
        bash_result("c", &format!("error: bundle failed because {}", "the dependency graph has a cycle and ".repeat(12)), 1),
    ];
    let s = summary_of(&msgs);
    let lint = noise(&s);
    assert!(lint.is_empty(), "{lint:?}\n{s}");
    assert!(s.contains("list_for_customer"), "the report's point: {s}");
    assert!(s.contains("Unexpected token '<'"), "the error: {s}");
    assert!(s.contains("[minified code,"), "{s}");
    assert!(!section(&s, "## Goal").contains("task-notification"), "{s}");
    for item in precision::items(&s) {
        assert!(
            item.text.chars().count() <= precision::LONG_ITEM,
            "{}",
            item.text
        );
    }
}

#[test]
fn lead_ins_and_fragments_are_no_decisions_or_next_steps() {
    let msgs = vec![
        user("Make the retry test deterministic."),
        said("Now let me look at the retry logic:"),
        said("The approach:\n- inject a clock instead of reading Date.now()\n- drive it from the test"),
        said("Going with the injected clock rather than fake timers, because fake timers leak between suites."),
        said("Now let"),
        user("ok"),
    ];
    let s = summary_of(&msgs);
    let decisions = section(&s, "## Key Decisions");
    assert!(
        decisions.contains("The approach: inject a clock instead of reading Date.now()"),
        "{s}"
    );
    assert!(decisions.contains("rather than fake timers"), "{s}");
    assert_eq!(decisions.matches("inject a clock").count(), 1, "{s}");
    assert!(!s.contains("Now let me look at the retry logic:"), "{s}");
    assert!(noise(&s).is_empty(), "{:?}\n{s}", noise(&s));
}

#[test]
fn a_pasted_provider_error_sets_no_constraint_and_small_talk_is_no_goal() {
    let msgs = vec![
        user("yo"),
        user("Set up the nightly backup of the postgres database to the S3 bucket acme-backups."),
        user("Never delete a backup younger than 14 days."),
        user("got this from the gateway: LLM request rejected: messages.14: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01XyZ. Each `tool_use` block must have a corresponding `tool_result` block in the next message."),
        said("That was a transient gateway error."),
        user("ls"),
        said("scripts/ and backups/."),
    ];
    let s = summary_of(&msgs);
    let constraints = section(&s, "## Constraints & Preferences");
    assert!(
        constraints.contains("Never delete a backup younger than 14 days."),
        "{s}"
    );
    assert!(!constraints.contains("tool_result"), "{s}");
    let goal = section(&s, "## Goal");
    assert!(goal.contains("acme-backups"), "{s}");
    assert!(
        !goal.contains("- yo") && !goal.contains("Never delete"),
        "{s}"
    );
    assert!(s.contains("Latest user reply: ls"), "{s}");
    assert!(noise(&s).is_empty(), "{:?}\n{s}", noise(&s));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z ]{0,40}",
            "(must|don't|## Goal|\n|x|🦀|é|`|\\.| ){0,30}",
            ".{0,200}",
        ]
    }

    fn block() -> impl Strategy<Value = Value> {
        prop_oneof![
            text().prop_map(|t| json!({"type": "text", "text": t})),
            text().prop_map(|t| json!({"type": "thinking", "thinking": t})),
            (0..4u8, prop::sample::select(vec!["read", "write", "edit", "bash", "grep"]), text())
                .prop_map(|(id, name, t)| json!({"type": "toolCall", "id": format!("c{id}"), "name": name, "arguments": {"path": t.clone(), "command": t}})),
            Just(json!(null)),
            Just(json!({"type": "image", "data": "AAAA", "mimeType": "image/png"})),
        ]
    }

    fn message() -> impl Strategy<Value = Value> {
        prop_oneof![
            text().prop_map(|t| json!({"role": "user", "content": t})),
            prop::collection::vec(block(), 0..4).prop_map(|b| json!({"role": "user", "content": b})),
            (prop::collection::vec(block(), 0..4), prop::sample::select(vec!["stop", "toolUse", "error", "aborted", "length"]), text())
                .prop_map(|(b, stop, err)| json!({"role": "assistant", "content": b, "stopReason": stop, "errorMessage": err})),
            (0..4u8, any::<bool>(), text()).prop_map(|(id, e, t)| json!({"role": "toolResult", "toolCallId": format!("c{id}"), "toolName": "bash", "isError": e, "content": [{"type": "text", "text": t}]})),
            (text(), -2..3i64, any::<bool>(), text()).prop_map(|(c, code, cancelled, out)| json!({"role": "bashExecution", "command": c, "exitCode": code, "cancelled": cancelled, "output": out})),
            text().prop_map(|t| json!({"role": "compactionSummary", "summary": t})),
            text().prop_map(|t| json!({"role": "custom", "customType": "x", "content": t})),
            Just(json!({"role": "toolResult", "content": null})),
            Just(json!(null)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn never_panics_and_fits(
            msgs in prop::collection::vec(message(), 0..25),
            prev in prop::option::of(text()),
            focus in prop::option::of(text()),
            max_tokens in 50u64..3000,
            target in 200u64..4000,
        ) {
            let inp = ExtractiveInput {
                messages: (&msgs).into(),
                previous_summary: prev.as_deref(),
                custom_instructions: focus.as_deref(),
                turn_prefix: (&msgs).into(),
                max_tokens,
                settings: ExtractiveSettings { target_tokens: target },
            };
            let s = summarize_history(&inp);
            prop_assert_eq!(headings_of(&s), HEADINGS.to_vec());
            prop_assert!(utf16_len(&s) <= budget_units(max_tokens));
            prop_assert_eq!(&s, &summarize_history(&inp));
            let t = summarize_turn_prefix(&msgs, max_tokens, ExtractiveSettings::DEFAULT);
            prop_assert_eq!(headings_of(&t), TP_HEADINGS.to_vec());
            prop_assert!(utf16_len(&t) <= budget_units(max_tokens));
        }
    }
}

/// An earlier summary that compactd repaired (its handoff check's section after Pi's file
/// blocks) is updated with the section's items in their own sections: the rule under
/// Constraints, the failure under Blocked, the identifier and the command in Critical Context,
/// each still naming its entry; the heading is no item.
#[test]
fn a_repair_section_of_the_previous_summary_is_merged_into_the_sections() {
    let previous = "## Goal\n- Port the parser to nom\n\n## Constraints & Preferences\n(none)\n\n## Progress\n### Done\n(none)\n\n### In Progress\n(none)\n\n### Blocked\n(none)\n\n## Key Decisions\n(none)\n\n## Next Steps\n(none)\n\n## Critical Context\n(none)\n\n<modified-files>\nsrc/parse.rs\n</modified-files>\n\n## Handoff check: also carried over\n(The summary above did not carry these; each names the entry holding it: getEntry / get_entry returns it whole.)\n- Constraint: Never change the public API. (entry a1b2c3d4)\n- Unresolved failure: `cargo test -p parser` failed: error[E0308]: mismatched types (entry e5f6a7b8)\n- Identifier: `8080` (in \"…serve the docs on port 8080.\") (entry a1b2c3d4)\n- Verification command: `cargo build --release` (entry 99aa88bb)\n- Modified file: `src/parse.rs` (edited) (entry 77cc66dd)";
    let messages = vec![
        json!({"role": "user", "content": "Also handle comments in the grammar.", "timestamp": 0}),
    ];
    let mut inp = input(&messages, &[], &[], 4000);
    inp.previous_summary = Some(previous);
    let s = summarize_history(&inp);
    assert!(
        section(&s, "## Constraints & Preferences")
            .contains("Never change the public API. (entry a1b2c3d4)"),
        "{s}"
    );
    assert!(
        section(&s, "### Blocked").contains("`cargo test -p parser` failed: error[E0308]"),
        "{s}"
    );
    let critical = section(&s, "## Critical Context");
    assert!(critical.contains("Identifier the user gave: `8080`"), "{s}");
    assert!(
        critical.contains("Verification command: `cargo build --release` (entry 99aa88bb)"),
        "{s}"
    );
    assert!(!s.contains("Handoff check"), "{s}");
    assert!(!s.contains("Modified file:"), "{s}");
}

/// A gateway's preamble (metadata blocks it labels as such, system lines) is split off the
/// user's own words; a user's own "context" before a pasted log stays part of the request.
#[test]
fn a_preamble_is_split_off_and_the_users_words_stay() {
    use super::noise::split_preamble;
    let text = "Conversation info (untrusted metadata):\n```json\n{\"message_id\": \"7731\"}\n```\n\nSender (untrusted metadata):\n```json\n{\"name\": \"Dana\"}\n```\n\nWhy is invoices.csv empty?";
    let (own, notes) = split_preamble(text);
    assert_eq!(own, "Why is invoices.csv empty?");
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(notes[0].0, "Conversation info (untrusted metadata)");
    let (own, notes) = split_preamble(
        "System: [2026-03-05 08:52] Heartbeat: all channels connected.\n\nRe-run it for yesterday.",
    );
    assert_eq!(own, "Re-run it for yesterday.");
    assert_eq!(notes[0].0, "system");
    // All preamble, or the user's own context: unchanged.
    let own_context = "Here's the context:\n```\nERROR boom\n```\n\nWhy does it fail?";
    assert_eq!(
        split_preamble(own_context),
        (own_context.to_owned(), vec![])
    );
    let only = "System: [2026-03-05 08:52] Heartbeat: all channels connected.";
    assert_eq!(split_preamble(only), (only.to_owned(), vec![]));
}

/// What a handoff names a command by, which commands verify the work, and a failure a pipe
/// hid behind its filter's exit status.
#[test]
fn verification_commands_their_keys_and_hidden_failures() {
    use super::facts::{command_key, hidden_failure, is_verification};
    assert_eq!(
        command_key("cd app && cargo test --all 2>&1 | tail -20"),
        "cargo test --all"
    );
    assert_eq!(
        command_key("export CI=1; npm run build > out.log"),
        "npm run build"
    );
    assert_eq!(command_key("git commit -m 'x'"), "git commit -m 'x'");
    for verifies in [
        "cargo test -p core",
        "RUST_LOG=debug cargo clippy --all-targets",
        "npm run test:unit",
        "python -m pytest tests/test_time.py -q",
        "go vet ./...",
        "npx tsc --noEmit",
        "make check",
    ] {
        assert!(is_verification(verifies), "{verifies}");
    }
    for other in ["git push", "ls -la", "npm install", "docker compose up -d"] {
        assert!(!is_verification(other), "{other}");
    }
    let out = "--- FAIL: TestRefund (0.02s)\nFAIL\nok  \tacme/charge\t0.3s";
    assert!(hidden_failure("go test ./... 2>&1 | tail -8", out));
    assert!(
        !hidden_failure("go test ./...", out),
        "no pipe: its own exit status says"
    );
    assert!(!hidden_failure(
        "go test ./... | tail -3",
        "ok  \tacme/charge\t0.3s"
    ));
}
