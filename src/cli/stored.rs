//! `compactd export` and `compactd import`: moving sessions between Pi's files and a shared
//! store (the configured backend, as the daemon uses it), byte for byte both ways (a file session and its exported or
//! imported copy load, and compact, identically).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use crate::config::Config;
use crate::store::{Backend, StoreError};

/// The configured backend, checked, or the error saying why it cannot be used (a usage error
/// when the configuration cannot even set it up).
fn backend(config: &Config) -> Result<Arc<dyn Backend>, i32> {
    let backend = config.storage.backend().map_err(|e| {
        crate::print_err!("{e}");
        EXIT_USAGE
    })?;
    backend.check().map_err(|e| {
        crate::print_err!("storage_unavailable: {e}");
        EXIT_FAILED
    })?;
    Ok(backend)
}

/// The exit code of a store's refusal: a request the backend cannot take (its kind of
/// session, say) is a usage error; anything else failed.
fn failed(e: &StoreError) -> i32 {
    crate::print_err!("{e}");
    match e {
        StoreError::Invalid(_) => EXIT_USAGE,
        _ => EXIT_FAILED,
    }
}

/// Writes stored session `header_id` as Pi JSONL to `output` (created, never overwritten) or
/// stdout.
pub fn export(config: &Config, header_id: &str, output: Option<&Path>) -> i32 {
    let store = match backend(config) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let text = match store.export(header_id) {
        Ok(t) => t,
        Err(e) => return failed(&e),
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
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

/// Loads the Pi session `file` into the store (the file is never written) and prints its
/// header id. A file of an older version is stored as Pi's migration would write it.
pub fn import(config: &Config, file: &Path) -> i32 {
    let store = match backend(config) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let (tree, report) = match crate::store::read_session_file(file, false) {
        Ok(t) => t,
        Err(e) => {
            crate::print_err!("{e}");
            return EXIT_FAILED;
        }
    };
    let header_line = if report.migrated {
        crate::json::stringify(&tree.header).into_bytes()
    } else {
        match first_line(file) {
            Ok(l) => l,
            Err(e) => {
                crate::print_err!("cannot read {}: {e}", file.display());
                return EXIT_FAILED;
            }
        }
    };
    if let Some(skipped) = report.skipped_text() {
        crate::print_err!("{skipped}, as Pi skips them");
    }
    match store.import(&header_line, &tree) {
        Ok(header_id) => {
            println!("{}", super::printable::line(&header_id));
            EXIT_OK
        }
        Err(crate::store::StoreError::Conflict(_)) => {
            let id = tree.header["id"].as_str().unwrap_or_default();
            crate::print_err!(
                "the store already holds session {id} (this file's header id): `compactd export {id}` writes it out; nothing was imported",
            );
            EXIT_FAILED
        }
        Err(e) => failed(&e),
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
