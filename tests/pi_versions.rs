//! Which Pi's rules a session follows, through the real binary: Pi 1.6.0's by default, the
//! daemon's own default from `--pi-version` or `[compat] pi_version` (the flag first), a
//! session's `piVersion` and its refusals, the rules changing what the daemon computes for the
//! same file, and the warning when a file Pi 1.6 wrote is read under 0.85's rules.

mod support;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::daemon_env::{model, Env};
use support::rpc_client::{Client, Framing};
use support::{conformance_cases, read_json, PiVersion};

/// A 1.6 case where Pi 1.6 omits a message by a `context_edit` (Pi 0.85 knows no such entry).
const OMIT_CASE: &str = "054-context-edit-omit";

/// A writable copy of one of Pi 1.6.0's recorded sessions.
fn copy_1_6_case(env: &Env, case: &str) -> PathBuf {
    let to = env.path(&format!("{case}.jsonl"));
    std::fs::copy(
        conformance_cases(PiVersion::V1_6)
            .join(case)
            .join("session.jsonl"),
        &to,
    )
    .expect("copy the case");
    std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("writable copy");
    to
}

fn open(c: &mut Client, path: &std::path::Path) -> String {
    let info = c.ok("openSession", json!({"path": path, "model": model()}));
    info["sessionId"].as_str().expect("sessionId").to_owned()
}

fn pi_version_of(c: &mut Client, sid: &str) -> Value {
    c.ok("getSettings", json!({"sessionId": sid}))["piVersion"].clone()
}

fn context_len(c: &mut Client, sid: &str) -> usize {
    c.ok("getContext", json!({"sessionId": sid}))["messages"]
        .as_array()
        .expect("messages")
        .len()
}

#[test]
fn sessions_follow_pi_1_6_by_default_and_each_may_choose_its_own() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let init = c.ok("initialize", json!({}));
    assert_eq!(init["capabilities"]["piVersion"], "1.6", "{init}");
    let versions = init["capabilities"]["piVersions"].to_string();
    assert!(
        versions.contains("\"1.6\"") && versions.contains("\"0.85\""),
        "{versions}"
    );

    let file = copy_1_6_case(&env, OMIT_CASE);
    let sid = open(&mut c, &file);
    assert_eq!(pi_version_of(&mut c, &sid), "1.6");
    // Under 1.6 the context is Pi 1.6's own projection, as recorded from it.
    let expected = read_json(
        &conformance_cases(PiVersion::V1_6)
            .join(OMIT_CASE)
            .join("expected.json"),
    );
    let recorded = expected["context"]["messages"]
        .as_array()
        .expect("recorded context")
        .len();
    let under_1_6 = context_len(&mut c, &sid);
    assert_eq!(under_1_6, recorded, "Pi 1.6's projection of {OMIT_CASE}");

    // The same session under 0.85's rules: the omitted message is back, the system messages
    // (0.85 had none) are not part of its context.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "piVersion": "0.85"}),
    );
    assert_eq!(pi_version_of(&mut c, &sid), "0.85");
    let under_0_85 = context_len(&mut c, &sid);
    assert_ne!(under_0_85, under_1_6, "the rules changed nothing");

    // Refusals name the member and change nothing.
    for bad in [json!("2.0"), json!(1.6), json!(""), json!(["1.6"])] {
        let e = c
            .request(
                "setSettingsOverrides",
                json!({"sessionId": sid, "piVersion": bad}),
            )
            .expect_err("refused");
        assert_eq!(e["code"], -32602, "{bad}: {e}");
        assert!(e["message"].to_string().contains("piVersion"), "{bad}: {e}");
        assert_eq!(pi_version_of(&mut c, &sid), "0.85", "after {bad}");
    }
    // Another session is not affected; `null` goes back to the daemon's default.
    let other = open(&mut c, &copy_1_6_case(&env, "055-context-edit-replace"));
    assert_eq!(pi_version_of(&mut c, &other), "1.6");
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "piVersion": null}),
    );
    assert_eq!(pi_version_of(&mut c, &sid), "1.6");
    assert_eq!(context_len(&mut c, &sid), under_1_6);
}

#[test]
fn the_daemons_default_comes_from_its_flag_over_its_config() {
    let env = Env::new();
    let file = copy_1_6_case(&env, OMIT_CASE);
    let default_of = |args: &[&str]| {
        let mut c = env.stdio(args, Framing::Ndjson);
        let init = c.ok("initialize", json!({}));
        let sid = open(&mut c, &file);
        let session = pi_version_of(&mut c, &sid);
        c.ok("closeSession", json!({"sessionId": sid}));
        (init["capabilities"]["piVersion"].clone(), session)
    };
    assert_eq!(
        default_of(&["--pi-version", "0.85"]),
        (json!("0.85"), json!("0.85"))
    );
    env.write_config("[compat]\npi_version = \"0.85\"\n");
    assert_eq!(default_of(&[]), (json!("0.85"), json!("0.85")));
    assert_eq!(
        default_of(&["--pi-version", "1.6"]),
        (json!("1.6"), json!("1.6"))
    );
    // A version compactd does not know stops the daemon before it serves, naming it.
    let out = env
        .command("stdio")
        .args(["--pi-version", "0.9"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("compactd stdio");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("0.9") && stderr.contains("1.6"), "{stderr}");
}

#[test]
fn a_file_pi_1_6_wrote_read_under_0_85_is_warned_about() {
    let env = Env::new();
    let written_by_1_6 = copy_1_6_case(&env, OMIT_CASE);
    let written_by_0_85 = env.session("005-medium-basic");
    let warning = "was written by Pi 1.6";

    // The CLI says so on stderr, under 0.85's rules only, and only for a file with 1.6 signs.
    let inspect = |file: &PathBuf, pi: &str| {
        let out = env
            .command("inspect")
            .arg(file)
            .args(["--json", "--pi-version", pi])
            .output()
            .expect("compactd inspect");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = inspect(&written_by_1_6, "0.85");
    assert!(
        stderr.contains(warning) && stderr.contains("a context_edit entry"),
        "{stderr}"
    );
    assert!(stderr.contains("--pi-version 1.6"), "{stderr}");
    assert!(!inspect(&written_by_1_6, "1.6").contains(warning));
    assert!(!inspect(&written_by_0_85, "0.85").contains(warning));

    // The daemon logs it when it opens such a file under 0.85's rules.
    let mut c = env.stdio(&["--pi-version", "0.85"], Framing::Ndjson);
    open(&mut c, &written_by_0_85);
    open(&mut c, &written_by_1_6);
    support::wait_until(
        std::time::Duration::from_secs(10),
        "the daemon logged the warning",
        || env.log_text().contains(warning),
    );
    let log = env.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(warning)).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains(OMIT_CASE), "{}", lines[0]);
}
