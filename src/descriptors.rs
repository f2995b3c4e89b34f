//! The process's budget of file descriptors: how many it may hold, raising that at start-up, and
//! saying so when they run out.
//!
//! Every open session file holds one descriptor (its lock and its lines share it), every
//! connection one. The common default soft limit of 1024 (desktop sessions, systemd services)
//! would stop a daemon at about a thousand sessions, while its hard limit is usually far higher
//! (systemd's 524288): the daemon raises its soft limit to the hard one when it starts, as Go's
//! runtime does for every program. Whatever the limit, a daemon that reaches it answers with an
//! error naming it, not with a bare `Too many open files`.

/// The soft and hard limits on open files (`RLIMIT_NOFILE`), where the system tells.
pub fn limits() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid `rlimit` for getrlimit(2) to write.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    Some((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft limit on open files to the hard one. Returns the soft limit before and after
/// when it changed. On macOS the kernel also caps it at `OPEN_MAX`, as Go does.
pub fn raise_soft_limit() -> Option<(u64, u64)> {
    let (before, hard) = limits()?;
    #[cfg(target_os = "macos")]
    let want = hard.min(libc::OPEN_MAX as libc::rlim_t);
    #[cfg(not(target_os = "macos"))]
    let want = hard;
    if want <= before {
        return None;
    }
    let lim = libc::rlimit {
        rlim_cur: want,
        rlim_max: hard,
    };
    // SAFETY: setrlimit(2) with a soft limit no higher than the hard limit just read.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return None;
    }
    Some((before, want))
}

/// Whether `e` is the process (`EMFILE`) or the system (`ENFILE`) out of file descriptors.
pub fn exhausted(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// What a client is told when `path` could not be opened for lack of descriptors: the limit,
/// what holds descriptors, and how to raise it.
pub fn exhausted_message(e: &std::io::Error, path: &std::path::Path) -> String {
    let limit = match limits() {
        Some((soft, _)) => format!("its limit of {soft} open files"),
        None => "its limit of open files".to_owned(),
    };
    let whose = match e.raw_os_error() {
        Some(libc::ENFILE) => "the system has run out of file descriptors".to_owned(),
        _ => format!("the daemon holds {limit}"),
    };
    format!(
        "cannot open {}: {whose} (each open session holds one, each connection one); close sessions (closeSession) or raise the limit (`ulimit -n` before starting the daemon, LimitNOFILE= in its service unit)",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_names_the_limit_and_what_to_do() {
        let e = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(exhausted(&e));
        assert!(!exhausted(&std::io::Error::from_raw_os_error(libc::ENOENT)));
        let text = exhausted_message(&e, std::path::Path::new("/s/a.jsonl"));
        let (soft, _) = limits().expect("getrlimit works here");
        assert!(
            text.contains("/s/a.jsonl") && text.contains(&format!("limit of {soft} open files")),
            "{text}"
        );
        assert!(text.contains("ulimit -n"), "{text}");
    }
}
