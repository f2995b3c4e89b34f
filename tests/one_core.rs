//! Everything reaches storage through one interface (`store::Backend`, chosen once at start-up
//! by `store::choose`, `store::SessionStorage` and the opaque `store::SessionRef`): outside
//! `src/store/` and the configuration that names the choice (`src/config.rs`), no code names a
//! concrete backend — no handler, lifecycle, event or transport path, no command of the CLI, no
//! compactor. A backend named there is how a copy of the core starts (a handler branching on
//! PostgreSQL, a command loading files its own way), so this fails as soon as one appears, in
//! code or in its tests.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// A line's code, without its `//` comment (doc comments may name what they explain).
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// The ways code names a concrete backend.
const CONCRETE: &[&str] = &[
    "store::postgres",
    "store::files",
    "store::Files",
    "store::SessionFile",
    "SessionFile::",
    "Postgres::",
    "Database::",
    "StoredSession::",
    "postgres::",
];

/// Where backends may be named: the storage shell, and the configuration's one arm per backend.
fn may_name_backends(file: &Path) -> bool {
    let src = Path::new(ROOT).join("src");
    file == src.join("store.rs")
        || file.starts_with(src.join("store"))
        || file == src.join("config.rs")
}

#[test]
fn no_module_outside_store_names_a_backend() {
    let mut files = Vec::new();
    sources(&Path::new(ROOT).join("src"), &mut files);
    files.retain(|f| !may_name_backends(f));
    assert!(files.len() > 100, "the sources were found: {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = code(line);
            if let Some(name) = CONCRETE.iter().find(|c| code.contains(**c)) {
                found.push(format!(
                    "{}:{}: names `{name}`: {}",
                    file.strip_prefix(ROOT).unwrap_or(file).display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "go through store::Backend / store::SessionStorage / store::SessionRef instead:\n{}",
        found.join("\n")
    );
}

/// The check itself: a line naming a backend is caught, the same words in a comment are not.
#[test]
fn the_check_catches_a_backend_named_in_code_only() {
    let caught = |line: &str| CONCRETE.iter().any(|c| code(line).contains(*c));
    assert!(caught(
        "    let db = crate::store::postgres::Database::open(url);"
    ));
    assert!(caught("let f = SessionFile::new(path, limits);"));
    assert!(!caught(
        "/// Unlike `store::postgres`, a file has no lease."
    ));
    assert!(!caught("let s = ctx.daemon.storage.open(&location, None);"));
}
