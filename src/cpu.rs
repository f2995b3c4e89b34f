//! CPU-heavy work inside the async daemon: parsing a big session, serializing a span for the
//! summarizer, the extractive summary, freeing a big session. Run directly on an async worker,
//! such work would stall every connection, not only those scheduled there: the runtime polls
//! the socket driver only from a worker that goes idle, so while the busy worker is the one
//! that would poll it (the only one, or the other parked away from it), nobody reads new
//! requests. [`blocking`] hands the
//! worker's other tasks (and the driver) to another thread for its duration
//! (`block_in_place`), so a 100 MB open or compaction never delays a small session's
//! `getContextUsage`; [`discard`] frees a big value on a thread of its own. Outside a
//! multi-threaded runtime (the CLI's, tests) `blocking` just runs the work.

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

/// Drops `value` on a low-priority thread of its own and returns at once. Freeing a 100 MB
/// session (some hundred thousand entries, each a handful of allocations) takes tens of
/// milliseconds; on an async worker that is a stall of every connection (see the module
/// comment), measured as a 17–34 ms wait of another client's `getContextUsage` when a big
/// session was closed. Values are dropped in the order they are discarded, and the
/// allocator's free memory is handed back once none came for [`IDLE_BEFORE_RELEASE`]. If the
/// thread cannot be started, or is gone, the value is dropped here.
pub fn discard<T: Send + 'static>(value: T) {
    type Garbage = Box<dyn Send>;
    static REAPER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Garbage>>> =
        std::sync::OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Garbage>();
        std::thread::Builder::new()
            .name("compactd-reaper".into())
            .spawn(move || {
                lower_own_priority();
                // The loop ends with the process.
                reap(rx, IDLE_BEFORE_RELEASE, release_free_memory);
            })
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = reaper {
        // A send fails only if the thread is gone; the value then drops here, with the error.
        let _ = tx.send(Box::new(value));
    }
}

/// Tells the reaper that much memory was just freed on some other thread, so that the
/// allocator's free memory is handed back once nothing else was freed for
/// [`IDLE_BEFORE_RELEASE`], as after a [`discard`]. A compaction's temporaries die on its own
/// thread (the extractive summary of a 100 MB session builds some 370 MB of message values and
/// text); without this, a daemon holding the compacted session stayed at 513 MB resident, of
/// which 133 MB was in use, until the session was closed.
pub fn release_soon() {
    #[cfg(test)]
    ASKED_ON_THIS_THREAD.with(|n| n.set(n.get() + 1));
    // A unit box does not allocate; it only wakes the reaper.
    discard(());
}

/// Calls [`release_soon`] when dropped. Held across work whose temporaries die on other
/// threads, it asks once, however the work ends: returned, failed, or cancelled (its future
/// dropped).
pub struct ReleaseWhenDone;

impl Drop for ReleaseWhenDone {
    fn drop(&mut self) {
        release_soon();
    }
}

#[cfg(test)]
thread_local! {
    /// How many times [`release_soon`] was called on this thread: the tests' witness (tests
    /// run in parallel, so a process-wide count would see the others').
    static ASKED_ON_THIS_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times [`release_soon`] was called on this thread.
#[cfg(test)]
pub(crate) fn releases_asked_here() -> u64 {
    ASKED_ON_THIS_THREAD.with(|n| n.get())
}

/// How long the reaper waits after the last value it freed before handing the allocator's
/// free memory back to the system (see [`release_free_memory`]).
const IDLE_BEFORE_RELEASE: std::time::Duration = std::time::Duration::from_secs(5);

/// The reaper's loop: drops each value as it is received, and calls `release` once nothing
/// was received for `idle` after the last value (not again until another value came). Returns
/// when every sender is gone.
fn reap<T>(rx: std::sync::mpsc::Receiver<T>, idle: std::time::Duration, mut release: impl FnMut()) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut freed = false;
    loop {
        let next = match freed {
            true => rx.recv_timeout(idle),
            false => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok(garbage) => {
                drop(garbage);
                freed = true;
            }
            Err(RecvTimeoutError::Timeout) => {
                release();
                freed = false;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Hands the allocator's free memory back to the system. glibc keeps what its per-thread
/// arenas freed resident for reuse, and a session is read and parsed on several threads into
/// 2 MiB pieces: a daemon that opened and closed a 100 MB session five times stayed at 153 MB
/// resident though it held no session (60 MB when the file was one buffer). Reuse is what
/// makes the next open fast (no page faults for its buffers), so the reaper releases only once
/// nothing was freed for [`IDLE_BEFORE_RELEASE`], as allocators that decay their free memory
/// do.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free pages of the allocator's own heaps to the system;
    // no memory in use is touched.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Runs `work(i)` for every `i` in `0..n` on up to `available_parallelism` threads (at most 8)
/// of a lower priority ([`lower_own_priority`]), and returns the results in index order. Each
/// thread takes the next index when it finishes one, so pieces of uneven cost still keep every
/// thread busy to the end. With one core or one item the work runs on the calling thread. A
/// panic in `work` is resumed here.
pub fn par_map_ordered<R: Send>(n: usize, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(8)
        .min(n);
    if threads < 2 {
        return (0..n).map(work).collect();
    }
    let next = AtomicUsize::new(0);
    let run = || {
        lower_own_priority();
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return done;
            }
            done.push((i, work(i)));
        }
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(n).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(run)).collect();
        for h in handles {
            let done = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            for (i, r) in done {
                slots[i] = Some(r);
            }
        }
    });
    // Every index was taken by exactly one thread, so no slot is empty.
    slots.into_iter().flatten().collect()
}

/// Raises this thread's `nice` value by [`BACKGROUND_NICE`] (Linux schedules threads one by
/// one, so only this thread is affected; lowering one's own priority needs no privilege). For
/// threads that do one client's bulk work (the pieces of a big session's read and parse), so
/// that an async worker with another client's request is run first when every core is busy.
pub fn lower_own_priority() {
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

    /// Free memory is released once per quiet spell after values were freed: not while values
    /// keep coming, not when nothing was freed.
    #[test]
    fn the_reaper_releases_free_memory_once_it_has_been_idle() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::{Duration, Instant};
        const IDLE: Duration = Duration::from_millis(50);
        let releases = std::sync::Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let counted = releases.clone();
        let reaper = std::thread::spawn(move || {
            reap(rx, IDLE, || {
                counted.fetch_add(1, Ordering::SeqCst);
            })
        });
        let wait_for = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while releases.load(Ordering::SeqCst) < n {
                assert!(Instant::now() < deadline, "release {n} never came");
                std::thread::yield_now();
            }
        };
        for _ in 0..5 {
            tx.send(vec![0; 1024]).unwrap();
        }
        wait_for(1);
        // Values keep coming, each well within the quiet spell: no release meanwhile.
        let burst = Instant::now();
        while burst.elapsed() < 8 * IDLE {
            tx.send(vec![0; 1024]).unwrap();
            let paced = Instant::now();
            while paced.elapsed() < IDLE / 10 {
                std::thread::yield_now();
            }
        }
        assert_eq!(
            releases.load(Ordering::SeqCst),
            1,
            "none while values kept coming"
        );
        wait_for(2);
        // Nothing more is freed: the reaper waits for the next value, never releasing again.
        drop(tx);
        reaper.join().unwrap();
        assert_eq!(
            releases.load(Ordering::SeqCst),
            2,
            "no release without a value freed"
        );
    }

    #[test]
    fn par_map_ordered_keeps_index_order_whatever_finishes_first() {
        let out = par_map_ordered(50, |i| {
            // Early items take longest, so later ones finish first.
            std::thread::sleep(std::time::Duration::from_micros(((50 - i) * 20) as u64));
            i * 3
        });
        assert_eq!(out, (0..50).map(|i| i * 3).collect::<Vec<_>>());
        assert!(par_map_ordered(0, |i| i).is_empty());
        assert_eq!(par_map_ordered(1, |i| i + 1), vec![1]);
    }

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
    fn a_discarded_value_is_dropped_on_another_thread() {
        struct Tell(std::sync::mpsc::Sender<std::thread::ThreadId>);
        impl Drop for Tell {
            fn drop(&mut self) {
                let _ = self.0.send(std::thread::current().id());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        discard(Tell(tx));
        let dropped_on = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the value is dropped");
        assert_ne!(dropped_on, std::thread::current().id());
    }

    #[test]
    fn a_panic_in_background_work_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| background(|| panic!("boom")));
        assert!(caught.is_err());
    }
}
