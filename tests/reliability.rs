//! Other writers, hostile paths and the storage guarantees, driven through the real binary
//! (issue: reliability and security). Each test reproduces a failure the daemon once had:
//! another process appending to a session compactd holds, a file replaced or truncated behind
//! its back, a half-written line, the CLI ignoring the daemon's lock, special files, refused
//! opens that still created files, paths outside the allowed roots, migrations losing data.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{keep_recent, model, open, parsed_lines, Env};
use support::rpc_client::{Client, Framing};

/// `compactd stdio` in the shared isolated environment, optionally with a config file's text.
fn client(env: &Env, config: Option<&str>) -> Client {
    match config {
        Some(text) => env.write_config(text),
        None => env.remove_config(),
    }
    env.stdio(&[], Framing::Ndjson)
}

fn user(c: &mut Client, sid: &str, text: &str) -> Result<Value, Value> {
    c.request(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role":"user","content": text, "timestamp": 1}}),
    )
}

fn kind(err: &Value) -> &str {
    err["data"]["kind"].as_str().unwrap_or("")
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The branch compactd's own `inspect` sees (root→leaf ids).
fn branch_ids(path: &Path) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(["inspect", "--json"])
        .arg(path)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("inspect json");
    v["session"]["branchEntryIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap_or("").to_owned())
        .collect()
}

fn pi_line(id: &str, parent: &str, text: &str) -> String {
    json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:00.000Z",
           "message":{"role":"user","content":text,"timestamp":2}})
    .to_string()
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn another_writers_entries_become_the_parent_of_the_next_append() {
    let env = Env::new();
    let path = env.session("005-medium-basic");
    let mut c = client(&env, None);
    let sid = open(&mut c, &path);
    let leaf = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert!(leaf.is_object());
    let before = branch_ids(&path);
    let last = before.last().unwrap().clone();
    // Another process appends two Pi entries, one whole, one in two writes.
    append_bytes(
        &path,
        format!("{}\n", pi_line("pi000001", &last, "from pi")).as_bytes(),
    );
    let second = pi_line("pi000002", "pi000001", "also from pi");
    let (a, b) = second.split_at(second.len() / 2);
    append_bytes(&path, a.as_bytes());
    let tail = b.to_owned();
    let p2 = path.clone();
    let finisher = std::thread::spawn(move || {
        // Pacing, not waiting: the other writer finishes its line a little later, around the
        // daemon's append (either order must give the same parent).
        std::thread::sleep(Duration::from_millis(30));
        append_bytes(&p2, format!("{tail}\n").as_bytes());
    });
    let r = user(&mut c, &sid, "from compactd").expect("append accepted");
    finisher.join().unwrap();
    let ours = r["entryId"].as_str().unwrap().to_owned();
    let all = lines(&path);
    let mine = all
        .iter()
        .find(|e| e["id"] == json!(ours))
        .expect("our entry is in the file");
    assert_eq!(
        mine["parentId"], "pi000002",
        "parent is the other writer's last entry"
    );
    // Every line is valid JSON: the half-written line was not split.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text
        .lines()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));
    let after = branch_ids(&path);
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(
        &after[before.len()..],
        ["pi000001", "pi000002", ours.as_str()]
    );
}

#[test]
fn a_torn_line_that_stays_torn_is_repaired_not_glued() {
    let env = Env::new();
    let path = env.session("005-medium-basic");
    let mut c = client(&env, None);
    let sid = open(&mut c, &path);
    append_bytes(&path, b"{\"type\":\"message\",\"id\":\"torn");
    let r = user(&mut c, &sid, "after a crash").expect("append accepted");
    let text = std::fs::read_to_string(&path).unwrap();
    let last: Vec<&str> = text.lines().rev().take(2).collect();
    assert_eq!(last[1], "{\"type\":\"message\",\"id\":\"torn");
    let mine: Value = serde_json::from_str(last[0]).unwrap();
    assert_eq!(mine["id"], r["entryId"]);
}

#[test]
fn replaced_or_truncated_files_are_never_written_until_reopened() {
    let env = Env::new();
    let path = env.session("005-medium-basic");
    let other = env.session("006-tool-heavy-file-ops");
    let mut c = client(&env, None);
    let sid = open(&mut c, &path);
    // Replaced by rename (an editor's save, another agent's rewrite).
    std::fs::rename(&other, &path).unwrap();
    let replaced = std::fs::read(&path).unwrap();
    let err = user(&mut c, &sid, "x").expect_err("refused");
    assert_eq!(kind(&err), "file_changed", "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), replaced, "nothing written");
    // Reopening reads the new file; the next append's parent is in it.
    let sid2 = open(&mut c, &path);
    assert_eq!(sid2, sid);
    let r = user(&mut c, &sid, "after reopen").expect("accepted after reopen");
    let all = lines(&path);
    let mine = all.iter().find(|e| e["id"] == r["entryId"]).unwrap();
    let parent = mine["parentId"].clone();
    assert!(
        all.iter().any(|e| e["id"] == parent),
        "parent {parent} is in the file"
    );
    // Truncated to 0 bytes: no header-less line is ever appended.
    std::fs::write(&path, b"").unwrap();
    let err = user(&mut c, &sid, "y").expect_err("refused");
    assert_eq!(kind(&err), "file_changed");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

#[test]
fn the_cli_refuses_a_file_the_daemon_holds() {
    let env = Env::new();
    let path = env.session("005-medium-basic");
    let mut c = client(&env, None);
    let _sid = open(&mut c, &path);
    let before = std::fs::read(&path).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(["compact", "--json", "--keep-recent-tokens", "100"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("locked"), "{stdout}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // Once the daemon lets go, the CLI compacts.
    drop(c);
    support::wait_for(
        Duration::from_secs(10),
        "the CLI compacts the unlocked file",
        || {
            let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
                .args(["compact", "--json", "--keep-recent-tokens", "100"])
                .arg(&path)
                .output()
                .unwrap();
            out.status.success().then_some(()).ok_or(format!("{out:?}"))
        },
    );
}

#[test]
fn special_files_are_refused_before_reading_and_the_daemon_keeps_serving() {
    let env = Env::new();
    let fifo = env.path("pipe.jsonl");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let mut c = client(
        &env,
        Some("[storage]\nallowed_roots = [\"/\"]\nmax_session_bytes = 4096\n"),
    );
    let t = Instant::now();
    let err = c
        .request("openSession", json!({"path": fifo, "model": model()}))
        .expect_err("fifo refused");
    assert_eq!(kind(&err), "not_regular_file", "{err}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let err = c
        .request(
            "openSession",
            json!({"path": "/dev/zero", "model": model()}),
        )
        .expect_err("device refused");
    assert_eq!(kind(&err), "not_regular_file", "{err}");
    let big = env.session("006-tool-heavy-file-ops");
    let err = c
        .request("openSession", json!({"path": big, "model": model()}))
        .expect_err("too large");
    assert_eq!(kind(&err), "too_large", "{err}");
    // Still a FIFO, and the daemon still answers.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    c.ok("listSessions", json!({}));
}

#[test]
fn refused_opens_create_nothing_and_sessions_leave_no_lock_files() {
    let env = Env::new();
    let mut c = client(&env, None);
    let missing = env.path("nodir/deeper/s.jsonl");
    let err = c
        .request("openSession", json!({"path": missing, "model": model()}))
        .expect_err("missing");
    assert_eq!(kind(&err), "not_found");
    assert!(!env.path("nodir").exists(), "no directory created");
    let text = env.path("notes.jsonl");
    std::fs::write(&text, "hello\n").unwrap();
    let err = c
        .request("openSession", json!({"path": text, "model": model()}))
        .expect_err("not a session");
    assert_eq!(kind(&err), "invalid_session_file");
    let path = env.session("005-medium-basic");
    // An empty lock file left by the old convention is cleaned up.
    let mut old_lock = path.as_os_str().to_owned();
    old_lock.push(".lock");
    std::fs::write(&old_lock, b"").unwrap();
    let _sid = open(&mut c, &path);
    let mut names: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".lock"))
        .collect();
    names.sort();
    assert!(names.is_empty(), "lock files beside sessions: {names:?}");
}

#[test]
fn paths_outside_the_allowed_roots_are_refused_untouched() {
    let env = Env::new();
    let inside = env.path("inside");
    std::fs::create_dir_all(&inside).unwrap();
    let outside = env.session("005-medium-basic");
    let before = std::fs::read(&outside).unwrap();
    let mut c = client(
        &env,
        Some(&format!(
            "[storage]\nallowed_roots = [\"{}\"]\n",
            inside.display()
        )),
    );
    let err = c
        .request("openSession", json!({"path": outside, "model": model()}))
        .expect_err("outside");
    assert_eq!(kind(&err), "path_not_allowed", "{err}");
    assert_eq!(std::fs::read(&outside).unwrap(), before);
    // A link inside the root that points outside is refused too.
    let link = inside.join("link.jsonl");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let err = c
        .request("openSession", json!({"path": link, "model": model()}))
        .expect_err("link outside");
    assert_eq!(kind(&err), "path_not_allowed");
    let empty = env.path("empty.jsonl");
    std::fs::write(&empty, b"").unwrap();
    let err = c
        .request("openSession", json!({"path": empty, "model": model()}))
        .expect_err("empty file outside");
    assert_eq!(kind(&err), "path_not_allowed");
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "no header written"
    );
}

#[test]
fn a_migration_keeps_the_original_beside_the_file() {
    let env = Env::new();
    let path = env.path("old.jsonl");
    let original = concat!(
        "{\"type\":\"session\",\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/\"}\n",
        "{\"type\":\"message\",\"timestamp\":\"t\",\"message\":{\"role\":\"user\",\"content\":\"y\"}}\n",
        "not json but someone's notes\n",
    );
    std::fs::write(&path, original).unwrap();
    let mut c = client(&env, None);
    let _sid = open(&mut c, &path);
    let backup = env.path("old.jsonl.v1.bak");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), original);
    let migrated = std::fs::read_to_string(&path).unwrap();
    assert!(migrated.contains("\"version\":3"));
}

#[test]
fn durability_always_is_accepted_and_appends_land() {
    let env = Env::new();
    let path = env.session("005-medium-basic");
    let mut c = client(&env, Some("[storage]\ndurability = \"always\"\n"));
    let sid = open(&mut c, &path);
    let r = user(&mut c, &sid, "durable").expect("append");
    assert!(lines(&path).iter().any(|e| e["id"] == r["entryId"]));
    // A bad value is a configuration error: the daemon refuses to start, saying why.
    let bad = env.path("bad.toml");
    std::fs::write(&bad, "[storage]\ndurability = \"sometimes\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .arg("--config")
        .arg(&bad)
        .arg("stdio")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("durability"));
}

/// A configuration allowing only `root`.
fn only_root(root: &Path) -> String {
    format!("[storage]\nallowed_roots = [\"{}\"]\n", root.display())
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}],
           "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
           "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
                     "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
           "stopReason": "stop", "timestamp": 3})
}

/// Every file and directory under `dir` (empty when it does not exist).
fn tree_of(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// `..` after directories that do not exist yet: the old check compared the path lexically
/// (`root/new/../../escape` starts with `root`), then the first write created `root/new` and
/// landed in `escape`, outside the root. Now `..` is resolved as the kernel will resolve it, and
/// the path is refused before anything is made.
#[test]
fn dot_dot_through_missing_directories_cannot_leave_the_root() {
    let env = Env::new();
    let root = env.path("root");
    std::fs::create_dir_all(&root).unwrap();
    let escape = env.path("escape");
    let mut c = client(&env, Some(&only_root(&root)));
    let dir = root.join("new/deeper/../../../escape");
    let err = c
        .request(
            "createSession",
            json!({"cwd": "/w", "sessionDir": dir, "model": model()}),
        )
        .expect_err("sessionDir escapes the root");
    assert_eq!(kind(&err), "path_not_allowed", "{err}");
    let err = c
        .request(
            "openSession",
            json!({"path": root.join("new/../../escape/s.jsonl"), "create": true, "cwd": "/w", "model": model()}),
        )
        .expect_err("path escapes the root");
    assert_eq!(kind(&err), "path_not_allowed", "{err}");
    assert!(!escape.exists(), "nothing created outside the root");
    assert!(tree_of(&root).is_empty(), "nothing created inside either");
    // `..` that stays inside the root is fine, and the file lands where it resolves to.
    let info = c.ok(
        "createSession",
        json!({"cwd": "/w", "sessionDir": root.join("a/b/../c"), "model": model()}),
    );
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    let path = std::path::PathBuf::from(info["path"].as_str().unwrap());
    assert!(path.starts_with(root.join("a/c")), "{}", path.display());
    user(&mut c, &sid, "hi").unwrap();
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": assistant("hello")}),
    );
    assert!(path.is_file());
    assert!(!escape.exists());
}

/// A session directory swapped for a link (to a directory outside the root) after the session
/// was created: the deferred first write used to follow the link and create the file outside.
/// Now the directories are walked without following links and the write is refused with `io`.
/// For a persisted session the same swap refuses the append (`file_changed`) and the copy
/// outside is untouched.
#[test]
fn a_session_directory_replaced_by_a_link_is_never_written_through() {
    let env = Env::new();
    let root = env.path("root");
    let outside = env.path("outside");
    std::fs::create_dir_all(root.join("sessions")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let mut c = client(&env, Some(&only_root(&root)));
    let info = c.ok(
        "createSession",
        json!({"cwd": "/w", "sessionDir": root.join("sessions"), "model": model()}),
    );
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    std::fs::rename(root.join("sessions"), root.join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("sessions")).unwrap();
    user(&mut c, &sid, "hi").unwrap();
    let err = c
        .request(
            "appendMessage",
            json!({"sessionId": sid, "message": assistant("hello")}),
        )
        .expect_err("the deferred write through the link is refused");
    assert_eq!(kind(&err), "io", "{err}");
    assert!(tree_of(&outside).is_empty(), "nothing written outside");

    // A persisted session: the directory is swapped for a link to a copy outside.
    let dir = root.join("d");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.jsonl");
    std::fs::copy(env.session("005-medium-basic"), &file).unwrap();
    let sid = open(&mut c, &file);
    user(&mut c, &sid, "before the swap").unwrap();
    let copy_dir = outside.join("copy");
    std::fs::create_dir_all(&copy_dir).unwrap();
    std::fs::copy(&file, copy_dir.join("s.jsonl")).unwrap();
    let copy_before = std::fs::read(copy_dir.join("s.jsonl")).unwrap();
    std::fs::rename(&dir, root.join("d-moved")).unwrap();
    std::os::unix::fs::symlink(&copy_dir, &dir).unwrap();
    let err = user(&mut c, &sid, "after the swap").expect_err("refused");
    assert_eq!(kind(&err), "file_changed", "{err}");
    assert_eq!(
        std::fs::read(copy_dir.join("s.jsonl")).unwrap(),
        copy_before
    );
    // Reopening by the path now resolves outside the root: refused.
    let err = c
        .request("openSession", json!({"path": file, "model": model()}))
        .expect_err("resolves outside");
    assert_eq!(kind(&err), "path_not_allowed", "{err}");
    assert_eq!(
        std::fs::read(copy_dir.join("s.jsonl")).unwrap(),
        copy_before
    );
}

/// Reads are confined as writes are (issue 34 item 10). A session's directory, and in a second
/// session the file itself, is moved outside the root after the session was opened and a link
/// to it left in its place; another writer then appends a line out there. The catch-up before
/// the next write used to open the file by its path, follow the link, find the same inode
/// (the stamp held) and hand the outside line to clients in the branch. Now every read walks
/// the checked path without following a link: the catch-up finds the file gone
/// (`file_changed`), the reload on reopen is refused (`path_not_allowed`, naming the link), and
/// nothing written outside reaches a client.
#[test]
fn reads_never_follow_a_link_out_of_the_root() {
    let env = Env::new();
    let root = env.path("root");
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let mut c = client(&env, Some(&only_root(&root)));
    let secret = "WRITTEN OUTSIDE THE ROOT";
    for (name, moved) in [("dir", "d"), ("file", "d/s.jsonl")] {
        let base = root.join(name);
        std::fs::create_dir_all(base.join("d")).unwrap();
        let file = base.join("d/s.jsonl");
        std::fs::copy(env.session("005-medium-basic"), &file).unwrap();
        let sid = open(&mut c, &file);
        let leaf = user_append(&mut c, &sid, "inside");
        // The session's directory (or the file) leaves the root; a link takes its place.
        let away = outside.join(name);
        std::fs::create_dir_all(&away).unwrap();
        std::fs::rename(base.join(moved), away.join("moved")).unwrap();
        std::os::unix::fs::symlink(away.join("moved"), base.join(moved)).unwrap();
        let out_there = if name == "dir" {
            away.join("moved/s.jsonl")
        } else {
            away.join("moved")
        };
        append_bytes(
            &out_there,
            format!("{}\n", pi_line("outside1", &leaf, secret)).as_bytes(),
        );
        let err = c
            .request("syncSession", json!({"sessionId": sid}))
            .expect_err("the catch-up does not read through the link");
        assert_eq!(kind(&err), "file_changed", "{name}: {err}");
        let err = user(&mut c, &sid, "after the move").expect_err("nor does a write");
        assert_eq!(kind(&err), "file_changed", "{name}: {err}");
        let branch = c.ok("getBranch", json!({"sessionId": sid}));
        let context = c.ok("getContext", json!({"sessionId": sid}));
        for reply in [&branch, &context] {
            assert!(!reply.to_string().contains(secret), "{name}: {reply}");
        }
        // Reopening resolves the path outside the root: refused, nothing read.
        let err = c
            .request("openSession", json!({"path": file, "model": model()}))
            .expect_err("outside the root");
        assert_eq!(kind(&err), "path_not_allowed", "{name}: {err}");
        assert!(!err.to_string().contains(secret), "{name}: {err}");
        c.ok("closeSession", json!({"sessionId": sid}));
    }
}

/// A migration's backup name planted in advance as a link to a file that does not exist yet:
/// the old `exists()` check followed the dangling link (false) and the copy created the file
/// outside. The temporary file's name (`.<file>.compactd-<pid>.tmp`) planted as a link to an
/// existing file: the old `File::create` truncated and overwrote it, and the rename then put
/// the link itself in place of the session. Now both are created `O_EXCL|O_NOFOLLOW`: the backup
/// goes to the next free name, the temporary file has an unguessable name, and the session file
/// is a regular file again.
#[test]
fn planted_links_at_migration_backup_and_temp_names_are_never_followed() {
    let env = Env::new();
    let root = env.path("root");
    let outside = env.path("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let file = root.join("old.jsonl");
    let v1 = "{\"type\":\"session\",\"id\":\"x\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n{\"type\":\"message\",\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"a\",\"timestamp\":1}}\n";
    std::fs::write(&file, v1).unwrap();
    let victim_new = outside.join("created-by-backup");
    std::os::unix::fs::symlink(&victim_new, root.join("old.jsonl.v1.bak")).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    let mut c = client(&env, Some(&only_root(&root)));
    let pid = c.pid().expect("daemon pid");
    let tmp = root.join(format!(".old.jsonl.compactd-{pid}.tmp"));
    std::os::unix::fs::symlink(&victim, &tmp).unwrap();
    let sid = open(&mut c, &file);
    assert!(!victim_new.exists(), "the backup did not follow the link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    assert_eq!(
        std::fs::read_to_string(root.join("old.jsonl.v1.bak.2")).unwrap(),
        v1,
        "the backup went to the next free name, byte for byte"
    );
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file(), "the session is a regular file");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"version\":3"), "{text}");
    user(&mut c, &sid, "after migration").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    // No temporary file of ours is left (only the planted link).
    let stray: Vec<_> = tree_of(&root)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp") && *p != tmp)
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

/// Lines Pi 0.85.0 reads that compactd used to skip or misread, each checked against Pi (the
/// oracle) before and after the daemon appends to the file:
/// - nesting past serde_json's recursion limit (128) in a message, the header and compaction
///   details: the line was skipped, so the leaf, the context and the estimate were Pi's
///   minus that entry;
/// - numbers beyond f64 (`1e400`, Infinity to Pi) in a timestamp, usage and the header
///   version: the entry was skipped, and a file whose header version overflowed was refused;
/// - lone surrogates in ids: read as U+FFFD, so `b\ud83d` matched a parent `b\ufffd` Pi does
///   not see as its parent, and the daemon's next entry named a parent Pi could not find.
///
/// - nesting past 512 levels (600 and 2 000 in a tool call's arguments and a tool result's
///   `details`, 100 000 in the header and a custom entry's data): the line was skipped, so its entries were missing. Now every
///   container deeper than `json::deep::HELD_DEPTH` is kept as its `JSON.stringify` text, so
///   the estimate (`JSON.stringify(arguments).length`), the context a client gets, the
///   summarizer's serialization and a compaction of them are Pi's, on the daemon's own
///   thread stacks.
#[test]
fn lines_pi_reads_are_read_as_pi_reads_them() {
    let oracle = support::oracle::Oracle::find("reliability: lines Pi reads");
    let env = Env::new();
    let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let header = |version: &str, extra: &str| {
        format!(
            r#"{{"type":"session","version":{version},"id":"h1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"{extra}}}"#
        )
    };
    let user = |id: &str, parent: &str, ts: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"hello {id}","timestamp":{ts}}}}}"#
        )
    };
    let usage = |input: &str| {
        format!(
            r#""usage":{{"input":{input},"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":105,"cost":{{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}}"#
        )
    };
    let assistant = |id: &str, parent: &str, args: &str, ts: &str, input: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:02.000Z","message":{{"role":"assistant","content":[{{"type":"text","text":"ok"}},{{"type":"toolCall","id":"c1","name":"bash","arguments":{args}}}],"api":"anthropic-messages","provider":"anthropic","model":"m",{},"stopReason":"toolUse","timestamp":{ts}}}}}"#,
            usage(input)
        )
    };
    let files: Vec<(&str, Vec<String>)> = vec![
        (
            "deep-message",
            vec![
                header("3", ""),
                user("a", "null", "1"),
                assistant("b", "a", &format!(r#"{{"x":{}}}"#, deep(300)), "2", "100"),
            ],
        ),
        (
            "deep-header-and-details",
            vec![
                header("3", &format!(r#","meta":{}"#, deep(200))),
                user("a", "null", "1"),
                user("b", "\"a\"", "2"),
                format!(
                    r#"{{"type":"compaction","id":"c","parentId":"b","timestamp":"2026-01-01T00:00:03.000Z","summary":"sum","firstKeptEntryId":"b","tokensBefore":50,"details":{{"readFiles":[],"modifiedFiles":[],"x":{}}}}}"#,
                    deep(200)
                ),
                user("d", "\"c\"", "4"),
            ],
        ),
        (
            "deep-600-arguments",
            vec![
                header("3", ""),
                user("a", "null", "1"),
                assistant("b", "a", &format!(r#"{{"x":{}}}"#, deep(600)), "2", "100"),
                user("d", "\"b\"", "4"),
            ],
        ),
        (
            "deep-100000-everywhere",
            vec![
                header("3", &format!(r#","meta":{}"#, deep(100_000))),
                user("a", "null", "1"),
                assistant(
                    "b",
                    "a",
                    // Pi's own `JSON.stringify` of what it measures or prints (arguments,
                    // context messages) overflows V8's stack well before 100 000 levels (its
                    // estimate throws): 2 000 there, 100 000 where Pi only parses.
                    &format!(r#"{{"x":{}}}"#, deep(2_000)),
                    "2",
                    "100",
                ),
                format!(
                    r#"{{"type":"message","id":"c","parentId":"b","timestamp":"2026-01-01T00:00:03.000Z","message":{{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{{"type":"text","text":"out"}}],"details":{{"k":{{"b":1,"0":2}},"x":{}}},"isError":false,"timestamp":3}}}}"#,
                    deep(2_000)
                ),
                format!(
                    r#"{{"type":"custom","id":"e","parentId":"c","timestamp":"2026-01-01T00:00:03.500Z","customType":"x","data":{{"x":{}}}}}"#,
                    deep(100_000)
                ),
                user("d", "\"e\"", "4"),
            ],
        ),
        (
            "overflowing-numbers",
            vec![
                header("3", ""),
                user("a", "null", "1e400"),
                assistant("b", "a", r#"{"cmd":"ls"}"#, "-1e400", "1e400"),
            ],
        ),
        (
            "overflowing-version",
            vec![
                header("1e400", ""),
                user("a", "null", "1"),
                user("b", "\"a\"", "2"),
            ],
        ),
        (
            "lone-surrogate-ids",
            vec![
                header("3", ""),
                user("x", "null", "1"),
                user(r"b\ufffd", "\"x\"", "1"),
                user(r"a\ud83d", "null", "2"),
                user(r"b\ud83d", r#""a\ud83d""#, "3"),
            ],
        ),
    ];
    let mut c = client(&env, None);
    for (name, lines) in &files {
        let file = env.path(&format!("{name}.jsonl"));
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let before = std::fs::read(&file).unwrap();
        let ours = env.inspect(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let pi_leaf = ours["session"]["leafId"].clone();
        if let Some(o) = &oracle {
            o.agrees(&file, &ours)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // The daemon reads it as Pi does, and its next entry is the child of Pi's leaf, the
        // parent's id written byte for byte.
        let sid = open(&mut c, &file);
        // The context a client gets is the one Pi builds (its messages, deep parts included).
        let context = c.ok("getContext", json!({"sessionId": sid}));
        if let Some(d) = support::first_diff(
            &context["messages"],
            &ours["context"]["messages"],
            "messages",
        ) {
            panic!("{name}: getContext differs from the analysis Pi agrees with: {d}");
        }
        let r = user_append(&mut c, &sid, name);
        let text = std::fs::read(&file).unwrap();
        assert_eq!(
            &text[..before.len()],
            &before[..],
            "{name}: nothing rewritten"
        );
        let ours_line = String::from_utf8_lossy(&text[before.len()..]).into_owned();
        let last_line = lines.last().unwrap();
        let leaf_raw = last_line
            .split(r#""id":"#)
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("");
        assert!(
            ours_line.contains(&format!(r#""parentId":{leaf_raw}"#)),
            "{name}: parentId {leaf_raw} byte for byte in {ours_line}"
        );
        let after = env.inspect(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(after["session"]["leafId"], json!(r), "{name}");
        let branch = after["session"]["branchEntryIds"].as_array().unwrap();
        assert_eq!(
            branch[branch.len() - 2],
            pi_leaf,
            "{name}: our entry is under Pi's leaf"
        );
        if let Some(o) = &oracle {
            o.agrees(&file, &after)
                .unwrap_or_else(|e| panic!("{name} after the append: {e}"));
        }
        c.ok("closeSession", json!({"sessionId": sid}));
    }
    // A compaction over the deepest lines: summarized (their serialization measured and
    // written without recursion), and the file Pi then loads is the one compactd sees.
    let file = env.path("deep-100000-everywhere.jsonl");
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 1);
    let done = c.ok("compact", json!({"sessionId": sid}));
    assert!(
        done["summary"].as_str().is_some_and(|s| !s.is_empty()),
        "{done}"
    );
    let after = env.inspect(&file).expect("inspect after the compaction");
    if let Some(o) = &oracle {
        o.agrees(&file, &after)
            .unwrap_or_else(|e| panic!("after the compaction: {e}"));
    }
    let context = c.ok("getContext", json!({"sessionId": sid}));
    if let Some(d) = support::first_diff(
        &context["messages"],
        &after["context"]["messages"],
        "messages",
    ) {
        panic!("after the compaction, getContext differs: {d}");
    }
    c.ok("listSessions", json!({}));
}

/// Appends a user message; returns its entry id.
fn user_append(c: &mut Client, sid: &str, text: &str) -> String {
    user(c, sid, text).expect("append")["entryId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A session file that becomes unreadable (mode 000, the daemon not root) gives the same
/// documented kind, `io` (-32030), on every method that touches the file; `compact` used to
/// report `file_changed` for it, naming a permission error. Needs `setpriv` (util-linux) to run
/// the daemon as an unprivileged user, since root reads a mode-000 file.
#[test]
fn an_unreadable_file_is_io_on_every_method() {
    const TEST: &str = "reliability: unreadable file";
    let found = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        support::skip_or_fail(TEST, "setpriv is not on PATH");
        return;
    }
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        support::skip_or_fail(TEST, "not root: cannot run the daemon as another user");
        return;
    }
    let env = Env::new();
    use std::os::unix::fs::PermissionsExt;
    for d in [
        env.dir.path().to_path_buf(),
        env.path("config"),
        env.path("agent"),
        env.path("run"),
        env.path("state"),
    ] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let file = env.session("009-bash-executions");
    let other = env.session_as("005-medium-basic", "never-readable");
    for f in [&file, &other] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_compactd"))
        .arg("stdio")
        .env("HOME", env.dir.path())
        .env_remove("COMPACTD_LOG");
    for (k, v) in env.vars() {
        cmd.env(k, v);
    }
    let mut c = Client::process(cmd, Framing::Ndjson);
    let err = c
        .request("openSession", json!({"path": other, "model": model()}))
        .expect_err("unreadable");
    assert_eq!(kind(&err), "io", "openSession: {err}");
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 2000);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    let calls: Vec<(&str, Value)> = vec![
        (
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": "x", "timestamp": 1}}),
        ),
        (
            "appendEntry",
            json!({"sessionId": sid, "entry": {"type": "session_info", "name": "n"}}),
        ),
        ("setModel", json!({"sessionId": sid, "model": model()})),
        ("syncSession", json!({"sessionId": sid})),
        ("pin", json!({"sessionId": sid, "text": "keep"})),
        ("compact", json!({"sessionId": sid})),
        ("openSession", json!({"path": file, "model": model()})),
    ];
    for (method, params) in calls {
        let err = c.request(method, params).expect_err("unreadable");
        assert_eq!(kind(&err), "io", "{method}: {err}");
        assert_eq!(err["code"], -32030, "{method}: {err}");
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    user(&mut c, &sid, "readable again").expect("writes work again");
}

/// An append whose answer was lost can be retried: with a client-chosen `entryId`, the retry
/// (here after the first client went away without reading its answer) answers with the entry
/// written the first time, and the file holds it once. The same id for another message, or an
/// id that is no id, is refused; `appendEntry` is idempotent the same way.
#[test]
fn a_retried_append_with_its_entry_id_is_written_once() {
    let env = Env::new();
    let socket = env.path("run/compactd.sock");
    let _daemon = env.serve_ready(&socket, &[], std::process::Stdio::null());
    let path = env.session("005-medium-basic");
    let before = lines(&path).len();
    let message = json!({"role": "user", "content": "run the migration"});
    {
        let mut first = Client::socket(&socket, Framing::Ndjson);
        let sid = open(&mut first, &path);
        // Sent, and the connection closed before the answer is read.
        first.send_raw(
            format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": 7, "method": "appendMessage",
                    "params": {"sessionId": sid, "message": message, "entryId": "req-42"}})
            )
            .as_bytes(),
        );
        support::wait_until(Duration::from_secs(10), "the first try is written", || {
            lines(&path).len() == before + 1
        });
    }
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let sid = open(&mut c, &path);
    for _ in 0..2 {
        let again = c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": message, "entryId": "req-42"}),
        );
        assert_eq!(again["entryId"], "req-42", "{again}");
    }
    let written = lines(&path);
    assert_eq!(written.len(), before + 1, "written once");
    assert_eq!(written[before]["id"], "req-42");
    assert_eq!(written[before]["message"]["content"], "run the migration");

    let other = c
        .request(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": "something else"}, "entryId": "req-42"}),
        )
        .expect_err("the id names another message");
    assert_eq!(kind(&other), "invalid_params", "{other}");
    assert!(
        other["message"].as_str().unwrap_or("").contains("req-42"),
        "{other}"
    );
    let bad = c
        .request(
            "appendMessage",
            json!({"sessionId": sid, "message": message, "entryId": "no spaces\u{1b}[2J"}),
        )
        .expect_err("not an id");
    assert_eq!(kind(&bad), "invalid_params", "{bad}");

    let custom = json!({"type": "custom", "customType": "note", "data": {"n": 1}});
    for _ in 0..2 {
        let r = c.ok(
            "appendEntry",
            json!({"sessionId": sid, "entry": custom, "entryId": "note-1"}),
        );
        assert_eq!(r["entryId"], "note-1");
    }
    let written = lines(&path);
    assert_eq!(written.len(), before + 2, "the custom entry once");
    assert_eq!(written[before + 1]["parentId"], "req-42");
    // Pi loads what was written.
    if let Some(oracle) =
        support::oracle::Oracle::find("a_retried_append_with_its_entry_id_is_written_once")
    {
        let pi = oracle.analyse(&path).expect("Pi loads the file");
        assert_eq!(pi["session"]["leafId"], "note-1", "{}", pi["session"]);
    }
}

/// An `entryId` equal to the session header's id was accepted, so that id appeared twice in the
/// file (once as the session's, once as an entry's). It is refused like an entry's id used for
/// another message, for `appendMessage` and `appendEntry`, and nothing is written.
#[test]
fn an_entry_id_equal_to_the_header_id_is_refused() {
    let env = Env::new();
    let path = env.session("005-medium-basic");
    let header_id = parsed_lines(&path).expect("the session")[0]["id"]
        .as_str()
        .expect("a header id")
        .to_owned();
    let before = std::fs::read(&path).unwrap();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &path);
    let message = json!({"role": "user", "content": "hello"});
    let custom = json!({"type": "custom", "customType": "note", "data": {}});
    for (method, params) in [
        (
            "appendMessage",
            json!({"sessionId": sid, "message": message, "entryId": header_id}),
        ),
        (
            "appendEntry",
            json!({"sessionId": sid, "entry": custom, "entryId": header_id}),
        ),
    ] {
        let err = c.request(method, params).expect_err("the header's id");
        assert_eq!(kind(&err), "invalid_params", "{method}: {err}");
        assert!(
            err["message"].as_str().unwrap_or("").contains("header"),
            "{method}: {err}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing written");
    // Any other id still works.
    let ok = c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": message, "entryId": "not-the-header"}),
    );
    assert_eq!(ok["entryId"], "not-the-header");
}
