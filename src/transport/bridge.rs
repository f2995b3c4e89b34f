//! `compactd connect`'s byte pump: stdin to the daemon's socket and the socket to stdout,
//! unchanged, so whatever framing the client speaks (LSP `Content-Length` or NDJSON) reaches the
//! daemon as it was written, and the daemon detects it per connection as usual.
//!
//! Closing follows the daemon's half-close rule: at the end of stdin the socket's write side is
//! shut down, and replies keep flowing to stdout until the daemon has answered everything and
//! closes the connection. When the daemon goes away first, the bridge ends too (stdout closes,
//! which an editor sees as its server exiting).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::UnixStream;

/// What a finished [`pump`] moved, and which side ended first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pumped {
    /// Bytes copied from the input to the daemon.
    pub sent: u64,
    /// Bytes copied from the daemon to the output.
    pub received: u64,
    /// Whether the input ended before the daemon closed the connection. A normal end: the
    /// client closed its input and the daemon answered everything, then closed. When the
    /// daemon's side ends while the input is still open, the daemon went away under its client
    /// (it died, was stopped, or dropped the connection): `connect` must not report that as a
    /// normal shutdown.
    pub input_ended: bool,
}

/// A future that tells whether the daemon still answers (`Err`: why not).
pub type Probe = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send>;

/// The bridge's watch over a daemon that stops answering: a stopped process keeps the
/// connection open and never writes, and the editor behind the bridge would wait forever.
/// Silence alone proves nothing (a compaction with a real model takes minutes without a byte),
/// so when the client has sent bytes and the daemon has said nothing for `every`, the bridge
/// asks `probe` (another connection's quick request, under its own deadline); a daemon that
/// answers it is alive and the bridge goes on, one that does not ends the bridge with the
/// probe's reason.
pub struct Watch {
    pub every: Duration,
    pub probe: Probe,
}

/// When each side last moved a byte, in nanoseconds after `epoch` (0: never). Stamps only
/// grow (`last`): a request the client sends right after an answer arrived is always later
/// than it. With milliseconds, the two often shared a stamp, and a daemon stopped in between
/// was never asked about: the bridge waited forever.
struct Activity {
    epoch: Instant,
    last: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
        }
    }

    /// A stamp later than every earlier one: the clock, or one past the last stamp when the
    /// clock has not moved on since.
    fn now(&self) -> u64 {
        let clock = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        let after = |last: u64| clock.max(last.saturating_add(1));
        // The update always succeeds (it never answers `None`): `Ok` holds the stamp before.
        let last = self
            .last
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(after(last))
            })
            .unwrap_or_else(|last| last);
        after(last)
    }

    /// The client spoke after the daemon last did, and has waited `every` since: time to ask
    /// whether the daemon is alive.
    fn unanswered_for(&self, every: Duration) -> bool {
        let sent = self.sent.load(Ordering::Relaxed);
        let received = self.received.load(Ordering::Relaxed);
        let every = u64::try_from(every.as_nanos()).unwrap_or(u64::MAX);
        sent > received && self.now().saturating_sub(sent) >= every
    }
}

/// A reader that stamps its side's time in `activity` whenever bytes come through it.
struct Stamped<R> {
    inner: R,
    activity: Arc<Activity>,
    received: bool,
}

impl<R: AsyncRead + Unpin> AsyncRead for Stamped<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let now = self.activity.now();
            let at = if self.received {
                &self.activity.received
            } else {
                &self.activity.sent
            };
            at.store(now, Ordering::Relaxed);
        }
        polled
    }
}

/// Copies `input` → `socket` and `socket` → `output` until the daemon closes the connection,
/// or, with a [`Watch`], until the daemon fails its probe (an error with the probe's reason).
pub async fn pump<R, W>(
    socket: UnixStream,
    input: R,
    output: W,
    watch: Option<Watch>,
) -> std::io::Result<Pumped>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let activity = Arc::new(Activity::new());
    let (from_daemon, mut to_daemon) = socket.into_split();
    let mut from_daemon = Stamped {
        inner: from_daemon,
        activity: activity.clone(),
        received: true,
    };
    let mut input = Stamped {
        inner: input,
        activity: activity.clone(),
        received: false,
    };
    let mut output = output;
    let upstream = async {
        let n = tokio::io::copy(&mut input, &mut to_daemon).await;
        // End of input (or a broken input): the daemon finishes what it received.
        let _ = to_daemon.shutdown().await;
        n
    };
    let downstream = async {
        let n = tokio::io::copy(&mut from_daemon, &mut output).await?;
        output.flush().await?;
        Ok::<u64, std::io::Error>(n)
    };
    tokio::pin!(upstream);
    tokio::pin!(downstream);
    let every = watch.as_ref().map_or(Duration::MAX, |w| w.every);
    let mut tick = tokio::time::interval(every.min(Duration::from_secs(3600)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The connection is over when the daemon's side ends; input may stay open forever (an
    // editor keeps its pipe), so it is not awaited past that. A write to a daemon that is
    // gone fails (the input counts as open then: the client did not end it).
    let mut sent = None;
    let mut input_ended = false;
    loop {
        tokio::select! {
            n = &mut upstream, if sent.is_none() => {
                input_ended = n.is_ok();
                sent = Some(n.unwrap_or(0));
            }
            n = &mut downstream => {
                return Ok(Pumped {
                    sent: sent.unwrap_or(0),
                    received: n?,
                    input_ended,
                })
            }
            _ = tick.tick(), if watch.is_some() => {
                if let Some(w) = &watch {
                    if activity.unanswered_for(w.every) {
                        (w.probe)().await.map_err(|why| {
                            std::io::Error::new(std::io::ErrorKind::TimedOut, why)
                        })?;
                        // Alive: wait another period before asking again.
                        activity.sent.store(activity.now(), Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A request sent right after an answer arrived is unanswered, however close the two
    /// are (with millisecond stamps it was not, most of the time, and the watch never asked).
    #[test]
    fn a_request_right_after_an_answer_is_unanswered() {
        let a = Activity::new();
        for _ in 0..10_000 {
            a.received.store(a.now(), Ordering::Relaxed);
            a.sent.store(a.now(), Ordering::Relaxed);
            assert!(a.unanswered_for(Duration::ZERO));
        }
        a.received.store(a.now(), Ordering::Relaxed);
        assert!(!a.unanswered_for(Duration::ZERO), "answered");
    }

    #[tokio::test]
    async fn bytes_pass_unchanged_both_ways_and_end_of_input_half_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // An echo server that answers only after the client's end of input (a half-close).
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(b"reply:").await.unwrap();
            s.write_all(&got).await.unwrap();
            got
        });
        let socket = UnixStream::connect(&path).await.unwrap();
        let frame = b"Content-Length: 2\r\n\r\n{}".to_vec();
        let (client_in, mut feed) = tokio::io::duplex(64);
        let (mut read_out, out) = tokio::io::duplex(64);
        let bridge = tokio::spawn(pump(socket, client_in, out, None));
        feed.write_all(&frame).await.unwrap();
        drop(feed);
        let mut seen = Vec::new();
        read_out.read_to_end(&mut seen).await.unwrap();
        assert_eq!(
            server.await.unwrap(),
            frame,
            "the daemon got the bytes as sent"
        );
        assert_eq!(seen, [b"reply:".as_slice(), &frame].concat());
        let pumped = bridge.await.unwrap().unwrap();
        assert_eq!(
            pumped,
            Pumped {
                sent: frame.len() as u64,
                received: (frame.len() + 6) as u64,
                input_ended: true
            }
        );
    }

    #[tokio::test]
    async fn a_daemon_that_goes_away_first_is_told_apart_from_a_normal_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // A daemon that answers one frame and goes away while its client's input is open.
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut first = [0u8; 2];
            s.read_exact(&mut first).await.unwrap();
            s.write_all(b"ok").await.unwrap();
        });
        let socket = UnixStream::connect(&path).await.unwrap();
        let (client_in, mut feed) = tokio::io::duplex(64);
        let (mut read_out, out) = tokio::io::duplex(64);
        let bridge = tokio::spawn(pump(socket, client_in, out, None));
        feed.write_all(b"{}").await.unwrap();
        server.await.unwrap();
        let mut seen = Vec::new();
        read_out.read_to_end(&mut seen).await.unwrap();
        assert_eq!(seen, b"ok");
        let pumped = bridge.await.unwrap().unwrap();
        assert!(!pumped.input_ended, "{pumped:?}");
        drop(feed);
    }
}
