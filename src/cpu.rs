//! CPU-heavy work inside the async daemon: parsing a big session, serializing a span for the
//! summarizer, the extractive summary. Run directly on an async worker, such work would stall
//! every connection scheduled there; [`blocking`] hands the worker's other tasks to another
//! thread for its duration (`block_in_place`), so a 100 MB open or compaction never delays a
//! small session's `getContextUsage`. Outside a multi-threaded runtime (the CLI's, tests) it just
//! runs the work.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f`, letting the runtime move other tasks off this worker meanwhile.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// How much lower than the daemon's threads a [`background`] thread is scheduled (a `nice`
/// increment): the kernel then runs an async worker the moment it has a request, instead of
/// letting it wait for the summary thread's time slice on a machine with few cores.
const BACKGROUND_NICE: i32 = 10;

/// Runs `f`, a long computation one client asked for (the extractive summary of a large
/// session), on a thread of its own at a lower scheduling priority, while the calling worker
/// hands its other tasks on as in [`blocking`]. Other clients' requests, which take
/// microseconds, are then never queued behind it for a time slice, even when every core is
/// busy. The result (or the panic) comes back to the caller.
pub fn background<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // The work stays reachable here, so it can run on this thread if no thread can be made.
    let job = std::sync::Mutex::new(Some(f));
    let take = || job.lock().ok().and_then(|mut j| j.take());
    blocking(|| {
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("compactd-summary".into())
                .spawn_scoped(scope, || {
                    lower_own_priority();
                    take().map(|f| f())
                });
            let done = match worker {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => None,
            };
            match done {
                Some(r) => r,
                None => match take() {
                    Some(f) => f(),
                    // Unreachable: the job is taken exactly once, by the thread or here.
                    None => panic!("the background job ran nowhere"),
                },
            }
        })
    })
}

/// Raises this thread's `nice` value by [`BACKGROUND_NICE`] (Linux schedules threads one by
/// one, so only this thread is affected; lowering one's own priority needs no privilege).
fn lower_own_priority() {
    // SAFETY: plain system calls on this thread's own id; no memory is shared with them.
    unsafe {
        let tid = libc::gettid();
        let now = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        libc::setpriority(
            libc::PRIO_PROCESS,
            tid as libc::id_t,
            (now + BACKGROUND_NICE).min(19),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_work_returns_its_result_from_a_lower_priority_thread() {
        let here = std::thread::current().id();
        let mine = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let data = [1, 2, 3];
        let (sum, there, nice) = background(|| {
            let nice =
                unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            (data.iter().sum::<i32>(), std::thread::current().id(), nice)
        });
        assert_eq!(sum, 6, "borrowed data is read and the result comes back");
        assert_ne!(there, here, "the work ran on a thread of its own");
        assert_eq!(nice, (mine + BACKGROUND_NICE).min(19));
        assert_eq!(
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) },
            mine,
            "the caller's priority is unchanged"
        );
    }

    #[test]
    fn a_panic_in_background_work_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| background(|| panic!("boom")));
        assert!(caught.is_err());
    }
}
