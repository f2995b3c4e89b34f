//! Opening a session file to read it: only a regular file within the size limit, reached by a
//! walk that follows no link, before a single byte is read. Reads, the lock and the migration's
//! rewrite all open it this way.

use std::fs::{self, File};
use std::path::Path;

use super::confined;
use super::Limits;
use crate::store::{io_err, StoreError};

fn type_name(ft: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading without blocking (a FIFO would block `open` itself) and checks it
/// is a regular file within the size limit, before a single byte is read. `path` is the path the
/// storage checked (absolute, links resolved, see [`confined::resolve`]); it is walked
/// as every write walks it, following no link ([`confined::open_read`]), so a component
/// swapped for a link since the check is refused (`path_not_allowed`), never read through.
pub fn open_regular(path: &Path, limits: &Limits) -> Result<(File, fs::Metadata), StoreError> {
    let f = confined::open_read(path).map_err(|e| read_err(path, e))?;
    let meta = f.metadata().map_err(io_err(path))?;
    if !meta.file_type().is_file() {
        return Err(StoreError::NotRegular {
            path: path.to_owned(),
            kind: type_name(meta.file_type()),
        });
    }
    if meta.len() > limits.max_bytes {
        return Err(StoreError::TooLarge {
            path: path.to_owned(),
            size: meta.len(),
            limit: limits.max_bytes,
        });
    }
    Ok((f, meta))
}

/// The storage error of a read whose walk failed: absent (`NotFound`), a link or a
/// non-directory on the way (`NotAllowed`, saying so), or any other I/O error.
fn read_err(path: &Path, e: std::io::Error) -> StoreError {
    if e.kind() == std::io::ErrorKind::NotFound {
        StoreError::NotFound(path.to_owned())
    } else if confined::refuses_a_link(&e) {
        StoreError::NotAllowed(format!(
            "Session path goes through a symbolic link (or a component that is not a directory), which compactd does not follow after checking the allowed roots: {} ({})",
            path.display(),
            confined::describe(&e)
        ))
    } else {
        io_err(path)(e)
    }
}
