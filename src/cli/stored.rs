//! `compactd export` and `compactd import`: moving sessions between Pi's files and the shared
//! store of the postgres backend, byte for byte both ways (a file session and its exported or
//! imported copy load, and compact, identically).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use crate::config::{Config, POSTGRES_URL_ENV};
use crate::store::postgres::Database;

/// The configured database, or the usage error saying how to configure one.
fn database(config: &Config) -> Result<Arc<Database>, i32> {
    let Some(url) = config.storage.postgres_url() else {
        eprintln!(
            "compactd: no shared store configured: set [storage] backend = \"postgres\" and postgres_url (or {POSTGRES_URL_ENV}) in the config file"
        );
        return Err(EXIT_USAGE);
    };
    let db = Database::open(&url).map_err(|e| {
        eprintln!("compactd: {e}");
        EXIT_USAGE
    })?;
    db.check().map_err(|e| {
        eprintln!("compactd: storage_unavailable: {e}");
        EXIT_FAILED
    })?;
    Ok(db)
}

/// Writes stored session `header_id` as Pi JSONL to `output` (created, never overwritten) or
/// stdout.
pub fn export(config: &Config, header_id: &str, output: Option<&Path>) -> i32 {
    let db = match database(config) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let text = match db.export(header_id) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("compactd: {e}");
            return EXIT_FAILED;
        }
    };
    let written = match output {
        Some(path) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| f.write_all(&text).and_then(|()| f.sync_all()))
            .map_err(|e| format!("cannot write {}: {e}", path.display())),
        None => std::io::stdout()
            .lock()
            .write_all(&text)
            .map_err(|e| format!("cannot write to stdout: {e}")),
    };
    match written {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("compactd: {e}");
            EXIT_FAILED
        }
    }
}

/// Loads the Pi session `file` into the store (the file is never written) and prints its
/// header id. A file of an older version is stored as Pi's migration would write it.
pub fn import(config: &Config, file: &Path) -> i32 {
    let db = match database(config) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let (tree, report) = match crate::store::load(file, false) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("compactd: {e}");
            return EXIT_FAILED;
        }
    };
    let header_line = if report.migrated {
        crate::json::stringify(&tree.header).into_bytes()
    } else {
        match first_line(file) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("compactd: cannot read {}: {e}", file.display());
                return EXIT_FAILED;
            }
        }
    };
    if report.skipped_lines > 0 {
        eprintln!(
            "compactd: {} malformed line(s) skipped, as Pi skips them",
            report.skipped_lines
        );
    }
    match db.import(&header_line, &tree) {
        Ok(header_id) => {
            println!("{header_id}");
            EXIT_OK
        }
        Err(crate::store::StoreError::Conflict(_)) => {
            eprintln!("compactd: the store already holds a session with this header id");
            EXIT_FAILED
        }
        Err(e) => {
            eprintln!("compactd: {e}");
            EXIT_FAILED
        }
    }
}

/// The file's first line, without its newline (the header as the file has it).
fn first_line(file: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::BufRead;
    let mut line = Vec::new();
    std::io::BufReader::new(std::fs::File::open(file)?).read_until(b'\n', &mut line)?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}
