//! Who holds a session file's lock, so that "locked by another compactd process" says which one:
//! the process id from the kernel's table of locks, and the socket that process listens on (a
//! daemon's clients reach it there; a `compactd stdio` or a one-shot command has none). Read
//! from `/proc` on Linux; elsewhere, or when the table cannot be read, nothing is added to the
//! message.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The process holding a file's `flock`, and the socket it listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub socket: Option<PathBuf>,
}

/// The text added to a lock refusal: ` (held by pid N, the daemon on SOCKET)`, ` (held by pid N,
/// which listens on no socket)`, or nothing when the holder cannot be told.
pub fn describe(path: &Path) -> String {
    match holder_of(path) {
        Some(Holder {
            pid,
            socket: Some(socket),
        }) => format!(" (held by pid {pid}, the daemon on {})", socket.display()),
        Some(Holder { pid, socket: None }) => {
            format!(" (held by pid {pid}, which listens on no socket)")
        }
        None => String::new(),
    }
}

/// The holder of `path`'s lock, when the kernel's lock table names one.
pub fn holder_of(path: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(path).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = flock_holder(&locks, meta.dev(), meta.ino())?;
    Some(Holder {
        pid,
        socket: listening_socket(pid),
    })
}

/// The pid of the `FLOCK` on the file `(dev, ino)` in `/proc/locks`' text. A line reads
/// `1: FLOCK  ADVISORY  WRITE 4242 fe:00:10010730 0 EOF`: the device as hexadecimal major and
/// minor numbers, then the inode.
fn flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A blocked waiter's line starts with `->` and shifts its fields: only holders count.
        if fields.len() < 6 || fields[1] != "FLOCK" {
            return None;
        }
        let mut id = fields[5].split(':');
        let is_ours = u64::from_str_radix(id.next()?, 16).ok()? == u64::from(major)
            && u64::from_str_radix(id.next()?, 16).ok()? == u64::from(minor)
            && id.next()?.parse::<u64>().ok()? == ino;
        if is_ours {
            fields[4].parse().ok()
        } else {
            None
        }
    })
}

/// The path of a listening Unix socket process `pid` holds open (its descriptors are this
/// user's to read): the socket inodes of `/proc/<pid>/fd` looked up in `/proc/net/unix`.
fn listening_socket(pid: u32) -> Option<PathBuf> {
    let inodes: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).ok()?;
    listening_path(&table, &inodes)
}

/// In `/proc/net/unix`'s text (`Num RefCount Protocol Flags Type St Inode Path`), the path of a
/// listening socket (flag `__SO_ACCEPTCON`, 0x10000) among `inodes`.
fn listening_path(table: &str, inodes: &[u64]) -> Option<PathBuf> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let listening = u32::from_str_radix(fields.get(3)?, 16).ok()? & 0x10000 != 0;
        let inode: u64 = fields.get(6)?.parse().ok()?;
        let path = fields.get(7)?;
        (listening && inodes.contains(&inode) && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_table_names_the_holder_of_the_file_and_skips_waiters_and_others() {
        let table = "1: POSIX  ADVISORY  WRITE 7 fe:00:10010730 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fe:00:10010730 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 fe:00:10010730 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 5 fe:01:10010730 0 EOF\n";
        let dev = libc::makedev(0xfe, 0);
        assert_eq!(flock_holder(table, dev, 10010730), Some(4242));
        assert_eq!(flock_holder(table, dev, 1), None);
        assert_eq!(
            flock_holder(table, libc::makedev(0xfe, 1), 10010730),
            Some(5)
        );
    }

    #[test]
    fn only_a_listening_socket_of_the_process_is_its_socket() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                     0000: 00000002 00000000 00010000 0001 01 83081 /run/other.sock\n\
                     0000: 00000003 00000000 00000000 0001 03 120960 /run/peer.sock\n\
                     0000: 00000002 00000000 00010000 0001 01 120961 /run/user/1000/compactd/compactd.sock\n";
        assert_eq!(
            listening_path(table, &[120960, 120961]),
            Some(PathBuf::from("/run/user/1000/compactd/compactd.sock"))
        );
        assert_eq!(listening_path(table, &[120960]), None);
    }
}
