//! `compactd doctor` through the real binary: the paths in use, a healthy installation with a
//! daemon answering (exit 0), and each kind of breakage a newcomer meets (a config that does not
//! load, a socket directory others can enter, a summarizer key that is not set, a database that
//! is down) reported as a failing line with what to do, and exit 1.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};

use support::daemon_env::Env;
#[cfg(feature = "postgres")]
use support::postgres::Postgres;

fn doctor(env: &Env, extra: &[&str]) -> Output {
    env.command("doctor")
        .args(extra)
        .env_remove("COMPACTD_POSTGRES_URL")
        .env_remove("DOCTOR_TEST_KEY")
        .output()
        .expect("run compactd doctor")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The report line of `subject` (`  <verdict> <subject> …`).
fn line<'a>(report: &'a str, verdict: &str, subject: &str) -> Option<&'a str> {
    report.lines().find(|l| {
        let mut words = l.split_whitespace();
        words.next() == Some(verdict)
            && words.next() == Some(subject.split(' ').next().unwrap_or(subject))
    })
}

#[test]
fn a_healthy_installation_prints_its_paths_and_the_daemon_and_exits_0() {
    let env = Env::new();
    let socket = env.path("run/compactd/compactd.sock");
    let child = env.serve_ready(&socket, &[], Stdio::null());
    let out = doctor(&env, &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    for (name, value) in [
        ("socket", socket.display().to_string()),
        ("log", env.log_file().display().to_string()),
        ("sessions", env.path("agent/sessions").display().to_string()),
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.trim_start().starts_with(name) && l.contains(&value)),
            "{name} {value} in\n{report}"
        );
    }
    assert!(report.contains("config    none (defaults"), "{report}");
    let daemon = line(&report, "ok", "daemon").unwrap_or_else(|| panic!("{report}"));
    assert!(
        daemon.contains(&format!("pid {}", child.0.id())),
        "{daemon}"
    );
    assert!(line(&report, "ok", "socket dir").is_some(), "{report}");
    assert!(line(&report, "ok", "summarizer").is_some(), "{report}");
    assert!(report.ends_with("no problem found\n"), "{report}");

    // A configuration file in use is named.
    env.write_config("idle_exit_seconds = 60\n");
    let report = stdout(&doctor(&env, &[]));
    let config = env.path("config/compactd/config.toml");
    assert!(
        report.contains(&format!("config    {}", config.display())),
        "{report}"
    );
}

#[test]
fn each_broken_check_fails_with_what_to_do() {
    let env = Env::new();
    // A key variable that is not set, and a socket directory other users can enter.
    env.write_config(
        "[summarizer]\nprovider = \"anthropic-messages\"\nbase_url = \"http://127.0.0.1:9\"\nmodel = \"m\"\napi_key_env = \"DOCTOR_TEST_KEY\"\n",
    );
    let dir = env.path("run/compactd");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = doctor(&env, &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let key = line(&report, "FAIL", "summarizer").unwrap_or_else(|| panic!("{report}"));
    assert!(key.contains("DOCTOR_TEST_KEY is not set"), "{key}");
    assert!(
        report.contains("fix: export DOCTOR_TEST_KEY=<key>"),
        "{report}"
    );
    let sock = line(&report, "FAIL", "socket dir").unwrap_or_else(|| panic!("{report}"));
    assert!(sock.contains("mode 0755"), "{sock}");
    assert!(report.ends_with("checks failed\n"), "{report}");

    // The key set: that check passes.
    let out = env
        .command("doctor")
        .env("DOCTOR_TEST_KEY", "k")
        .output()
        .unwrap();
    let report = stdout(&out);
    assert!(line(&report, "ok", "summarizer").is_some(), "{report}");

    // A configuration that does not load is reported (not a usage error), naming the file.
    env.write_config("no_such_setting = 1\n");
    let out = doctor(&env, &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let config = line(&report, "FAIL", "config").unwrap_or_else(|| panic!("{report}"));
    assert!(config.contains("config.toml"), "{config}");
    assert!(report.contains("no_such_setting"), "{report}");
}

#[cfg(feature = "postgres")]
#[test]
fn postgresql_is_reached_and_its_schema_checked_or_the_failure_says_what_to_do() {
    let Some(mut pg) = Postgres::start("doctor_postgres") else {
        return;
    };
    let env = Env::new();
    env.write_config(&pg.config());
    let out = doctor(&env, &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let storage = line(&report, "ok", "storage").unwrap_or_else(|| panic!("{report}"));
    assert!(
        storage.contains("PostgreSQL reached, schema in place"),
        "{storage}"
    );
    assert!(
        pg.psql("SELECT max(version) FROM compactd_schema")
            == compactd::store::postgres::SCHEMA_VERSION.to_string(),
        "the schema is in place, at its latest version"
    );
    pg.kill_server();
    let out = doctor(&env, &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(line(&report, "FAIL", "storage").is_some(), "{report}");
    assert!(
        report.contains("fix: check storage.postgres_url"),
        "{report}"
    );
}

/// `status` reports the config file and the log the daemon actually uses: the default lookup's
/// file by its path, an on-demand daemon's log file, a hand-started daemon's stderr as no file.
/// With the configuration broken afterwards (a bad value), `status` and `stop` still reach the
/// daemon through the socket the file names, and `doctor` reports the daemon's own files.
#[test]
fn status_stop_and_doctor_report_what_is_in_use_and_work_with_a_broken_config() {
    let env = Env::new();
    let socket = env.path("run/custom/compactd.sock");
    let _stop = support::daemon_env::Stopper(socket.clone());
    env.write_config(&format!("socket = \"{}\"\n", socket.display()));
    let config = env.path("config/compactd/config.toml");
    let started = env.command("start").output().expect("start");
    assert!(started.status.success(), "{started:?}");
    let status = env.command("status").output().expect("status");
    let said = stdout(&status);
    assert_eq!(status.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("config: {}", config.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("log: {}", env.log_file().display())) && env.log_file().is_file(),
        "{said}"
    );

    // A bad edit: the file no longer loads, but its socket is still there to read.
    env.write_config(&format!(
        "socket = \"{}\"\nidle_exit_seconds = \"soon\"\n",
        socket.display()
    ));
    let doctor_out = doctor(&env, &[]);
    let report = stdout(&doctor_out);
    assert_eq!(doctor_out.status.code(), Some(1), "{report}");
    assert!(line(&report, "FAIL", "config").is_some(), "{report}");
    let daemon = line(&report, "ok", "daemon").unwrap_or_else(|| panic!("{report}"));
    assert!(
        daemon.contains(&format!("it uses config {}", config.display()))
            && daemon.contains(&format!("logs to {}", env.log_file().display())),
        "{daemon}"
    );
    let status = env.command("status").output().expect("status");
    let said = stdout(&status);
    assert_eq!(status.status.code(), Some(0), "{said}\n{status:?}");
    assert!(said.contains(&socket.display().to_string()), "{said}");
    assert!(
        String::from_utf8_lossy(&status.stderr).contains("idle_exit_seconds"),
        "the broken setting is still named: {status:?}"
    );
    let stop = env.command("stop").output().expect("stop");
    assert_eq!(stop.status.code(), Some(0), "{stop:?}");
    assert!(stdout(&stop).contains("stopped the daemon"), "{stop:?}");
    assert!(support::daemon_env::daemons_on(&socket).is_empty());

    // A daemon started by hand logs to its stderr (here a pipe): no log file is claimed.
    env.remove_config();
    let hand = env.path("run/hand.sock");
    let _daemon = env.serve_ready(&hand, &[], Stdio::null());
    let status = env
        .command("status")
        .arg("--socket")
        .arg(&hand)
        .output()
        .expect("status");
    let said = stdout(&status);
    assert!(said.contains("config: none (the defaults)"), "{said}");
    assert!(said.contains("log: its stderr, which is no file"), "{said}");
}
