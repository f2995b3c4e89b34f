//! Message framing on a byte stream (protocol.md §2): newline-delimited JSON, or LSP-style
//! `Content-Length` headers, detected per connection from the first non-whitespace byte.
//!
//! Memory stays bounded whatever a client sends: an NDJSON line over the size limit is skipped
//! to its newline and reported as [`Frame::Oversized`] (the connection stays usable); an LSP
//! `Content-Length` over the limit is reported as [`Frame::TooLarge`] without reading the body
//! (the length cannot be trusted, so the connection closes); and every reader draws the bytes
//! of a frame it is assembling from one daemon-wide [`FrameBudget`], so many clients sending
//! huge frames at once cannot add up to more than the budget. After an LSP body that was not
//! JSON (a lying, too-short length), the reader resynchronises on the next `Content-Length`
//! header even when it follows the stray bytes on the same line.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// Default largest frame accepted: 64 MiB.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

/// Default total of frame bytes all connections together may be assembling: 256 MiB.
pub const DEFAULT_MAX_BUFFERED: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON message per line.
    Ndjson,
    /// `Content-Length: N\r\n\r\n` + N bytes.
    Lsp,
}

/// What the reader produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Message(Vec<u8>),
    /// An NDJSON line larger than the limit was skipped; carries its size.
    Oversized(usize),
    /// An LSP header announced a body larger than the limit (the body was not read; the
    /// connection cannot stay in step and should be closed).
    TooLarge(usize),
    /// A frame was skipped because the daemon-wide buffer budget was exhausted; carries its size.
    Busy(usize),
    /// LSP headers that could not be understood (the reader resynchronises on the next header).
    BadHeader(String),
}

/// The daemon-wide allowance of bytes held in partly read frames, shared by every reader.
#[derive(Debug, Clone)]
pub struct FrameBudget {
    used: Arc<AtomicUsize>,
    limit: usize,
}

impl FrameBudget {
    pub fn new(limit: usize) -> FrameBudget {
        FrameBudget {
            used: Arc::new(AtomicUsize::new(0)),
            limit,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `n` bytes of the budget, or nothing when they do not fit.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::SeqCst);
    }
}

/// Whether a connection is inside a frame and since when, for the listener to choose which
/// connection to close when every slot is taken: the one whose partial request is oldest,
/// whatever its byte rate (see `transport::unix`). Between frames it reports nothing: a client
/// with nothing to send is not holding a request back.
#[derive(Debug)]
pub struct FrameProgress {
    epoch: std::time::Instant,
    /// Milliseconds after `epoch` of the frame's first byte, plus one; 0 between frames.
    started: std::sync::atomic::AtomicU64,
}

impl Default for FrameProgress {
    fn default() -> Self {
        FrameProgress {
            epoch: std::time::Instant::now(),
            started: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl FrameProgress {
    /// A frame's first byte arrived now.
    fn start(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.started.store(ms + 1, Ordering::Relaxed);
    }

    /// The frame ended (or the stream did).
    fn clear(&self) {
        self.started.store(0, Ordering::Relaxed);
    }

    /// How long ago the frame in progress started; `None` between frames.
    pub fn age(&self) -> Option<std::time::Duration> {
        let started = self.started.load(Ordering::Relaxed).checked_sub(1)?;
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some(std::time::Duration::from_millis(
            now.saturating_sub(started),
        ))
    }
}

/// Why a read inside a frame gave up.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// The frame's next byte did not come within the idle timeout.
    Idle(std::time::Duration),
    /// The whole frame did not arrive within its time budget from its first byte.
    Budget(std::time::Duration),
}

impl Limit {
    fn error(self) -> std::io::Error {
        let text = match self {
            Limit::Idle(d) => format!("a started frame got no byte for {} ms", d.as_millis()),
            Limit::Budget(d) => format!(
                "a request was still arriving {} ms after its first byte",
                d.as_millis()
            ),
        };
        std::io::Error::new(std::io::ErrorKind::TimedOut, text)
    }
}

/// Waits for `read` at most `wait` (no limit: `None`); past it, the `limit`'s error.
async fn within<T>(
    wait: Option<(std::time::Duration, Limit)>,
    read: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    match wait {
        None => read.await,
        Some((d, limit)) => tokio::time::timeout(d, read)
            .await
            .map_err(|_| limit.error())?,
    }
}

/// Reads frames from a buffered stream.
pub struct FrameReader<R> {
    inner: R,
    framing: Option<Framing>,
    max_frame: usize,
    budget: FrameBudget,
    /// How long a started frame may go without a byte (see [`FrameReader::with_idle_timeout`]).
    idle: Option<std::time::Duration>,
    /// How long a frame may take from its first byte to its last (see
    /// [`FrameReader::with_deadline`]).
    deadline: Option<std::time::Duration>,
    /// When the frame in progress started.
    started: Option<tokio::time::Instant>,
    /// Where the frame in progress is reported (see [`FrameReader::with_progress`]).
    progress: Option<Arc<FrameProgress>>,
}

/// Default longest wait for the next byte of a frame that has started: 30 s.
pub const DEFAULT_FRAME_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Default time budget of one frame from its first byte to its last: 5 s. A local client
/// writes the largest frame (64 MiB) in well under a second; one that takes longer (a byte at
/// a time) holds a connection slot and frame budget that others need.
pub const DEFAULT_FRAME_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    /// `framing: None` detects it from the first message.
    pub fn new(inner: R, framing: Option<Framing>, max_frame: usize, budget: FrameBudget) -> Self {
        FrameReader {
            inner,
            framing,
            max_frame,
            budget,
            idle: None,
            deadline: None,
            started: None,
            progress: None,
        }
    }

    /// Reports each frame's progress to `progress` (a socket connection's slot).
    pub fn with_progress(mut self, progress: Option<Arc<FrameProgress>>) -> Self {
        self.progress = progress;
        self
    }

    /// A frame's first byte is here: its time budget starts.
    fn start(&mut self) {
        self.started = Some(tokio::time::Instant::now());
        if let Some(p) = &self.progress {
            p.start();
        }
    }

    /// How long the next read inside the frame may wait, and which limit ends it: the idle
    /// timeout, or what is left of the frame's budget when that is shorter.
    fn wait(&self) -> Option<(std::time::Duration, Limit)> {
        let idle = self.idle.map(|d| (d, Limit::Idle(d)));
        let budget = self.deadline.map(|d| {
            let spent = self
                .started
                .map_or(std::time::Duration::ZERO, |s| s.elapsed());
            (d.saturating_sub(spent), Limit::Budget(d))
        });
        match (idle, budget) {
            (Some(i), Some(b)) => Some(if b.0 < i.0 { b } else { i }),
            (i, b) => i.or(b),
        }
    }

    /// Once a frame's first byte has arrived, the whole frame must arrive within `deadline`
    /// (`None`: no limit), or the stream ends with `TimedOut` (the connection is closed): a
    /// client sending a byte now and then restarts no idle timeout that way, and cannot hold a
    /// connection slot, or budget, for longer than this per request.
    pub fn with_deadline(mut self, deadline: Option<std::time::Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Once a frame has started, a wait of more than `idle` for its next byte ends the stream
    /// with `TimedOut` (the connection is closed): a client that sends half a frame and stalls
    /// (slowloris) cannot hold a connection slot, or budget, forever. Waiting between frames is
    /// not limited: an idle client with nothing to send keeps its connection.
    pub fn with_idle_timeout(mut self, idle: Option<std::time::Duration>) -> Self {
        self.idle = idle;
        self
    }

    /// The framing in use (known after the first frame, or when forced).
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// Skips whitespace and returns the next byte without consuming it (`None` at EOF).
    async fn peek_non_ws(&mut self) -> std::io::Result<Option<u8>> {
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok(None);
            }
            match buf.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(i) => {
                    let b = buf[i];
                    self.inner.consume(i);
                    return Ok(Some(b));
                }
                None => {
                    let n = buf.len();
                    self.inner.consume(n);
                }
            }
        }
    }

    /// The next frame, or `None` at end of stream.
    pub async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        let frame = self.next_frame().await;
        self.started = None;
        if let Some(p) = &self.progress {
            p.clear();
        }
        frame
    }

    async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        let Some(first) = self.peek_non_ws().await? else {
            return Ok(None);
        };
        self.start();
        let framing = *self
            .framing
            .get_or_insert(if first == b'{' || first == b'[' {
                Framing::Ndjson
            } else {
                Framing::Lsp
            });
        match framing {
            Framing::Ndjson => self.read_line().await.map(Some),
            Framing::Lsp => self.read_lsp().await,
        }
    }

    /// Reads up to and excluding the next `\n`, enforcing the limit and the budget.
    async fn read_line(&mut self) -> std::io::Result<Frame> {
        let mut out = Vec::new();
        let mut size = 0usize;
        let mut held = 0usize;
        let mut busy = false;
        let result = loop {
            let wait = self.wait();
            let buf = match within(wait, self.inner.fill_buf()).await {
                Ok(b) => b,
                Err(e) => break Err(e),
            };
            if buf.is_empty() {
                break Ok(());
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            size = size.saturating_add(chunk.len());
            if size <= self.max_frame && !busy {
                if self.budget.take(chunk.len()) {
                    held += chunk.len();
                    out.extend_from_slice(chunk);
                } else {
                    busy = true;
                    out = Vec::new();
                }
            } else if !out.is_empty() {
                out = Vec::new();
            }
            let consumed = done.unwrap_or(buf.len());
            self.inner.consume(consumed);
            if done.is_some() {
                break Ok(());
            }
        };
        self.budget.give_back(held);
        result?;
        if size > self.max_frame {
            return Ok(Frame::Oversized(size));
        }
        if busy {
            return Ok(Frame::Busy(size));
        }
        if out.last() == Some(&b'\r') {
            out.pop();
        }
        Ok(Frame::Message(out))
    }

    /// Reads one header line (without CRLF); `None` at EOF.
    async fn header_line(&mut self) -> std::io::Result<Option<String>> {
        const MAX_HEADER_LINE: usize = 8192;
        let mut line = Vec::new();
        // Chunk by chunk, so the idle timeout is the wait for the next byte, as in a body.
        loop {
            let wait = self.wait();
            let buf = within(wait, self.inner.fill_buf()).await?;
            if buf.is_empty() {
                break;
            }
            let take = &buf[..buf.len().min(MAX_HEADER_LINE - line.len())];
            let (part, done) = match take.iter().position(|&b| b == b'\n') {
                Some(i) => (&take[..=i], true),
                None => (take, false),
            };
            line.extend_from_slice(part);
            let n = part.len();
            self.inner.consume(n);
            if done || line.len() >= MAX_HEADER_LINE {
                break;
            }
        }
        if line.is_empty() {
            return Ok(None);
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        Ok(Some(String::from_utf8_lossy(&line).into_owned()))
    }

    async fn read_lsp(&mut self) -> std::io::Result<Option<Frame>> {
        let mut length: Option<usize> = None;
        let mut bad: Option<String> = None;
        loop {
            let Some(mut line) = self.header_line().await? else {
                return Ok(None);
            };
            if line.is_empty() {
                break;
            }
            // Resynchronise: stray bytes (the rest of a body whose length lied) before a
            // `Content-Length` header start a fresh header block.
            if let Some(pos) = line.to_ascii_lowercase().find("content-length:") {
                if pos > 0 {
                    tracing::debug!(skipped = pos, "stray bytes before a header skipped");
                    line = line[pos..].to_owned();
                    bad = None;
                }
            }
            match line.split_once(':') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                    let value = value.trim();
                    match value.parse::<usize>() {
                        Ok(n) => length = Some(n),
                        // All digits but too big for a usize: certainly over the limit.
                        Err(_)
                            if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            length = Some(usize::MAX)
                        }
                        Err(_) => bad = Some(format!("invalid Content-Length: {value}")),
                    }
                }
                Some(_) => {}
                None => bad = Some(format!("malformed header line: {line}")),
            }
        }
        let Some(len) = length else {
            return Ok(Some(Frame::BadHeader(
                bad.unwrap_or_else(|| "missing Content-Length header".into()),
            )));
        };
        if len > self.max_frame {
            return Ok(Some(Frame::TooLarge(len)));
        }
        // The budget is charged as the body's bytes arrive, never reserved from the header: a
        // header announcing a large body followed by nothing holds no budget (and no memory).
        let mut body = Vec::new();
        let mut remaining = len;
        let mut held = 0usize;
        let mut busy = false;
        let result = loop {
            if remaining == 0 {
                break Ok(());
            }
            let wait = self.wait();
            let buf = match within(wait, self.inner.fill_buf()).await {
                Ok(b) => b,
                Err(e) => break Err(e),
            };
            if buf.is_empty() {
                break Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let n = buf.len().min(remaining);
            if !busy {
                if self.budget.take(n) {
                    held += n;
                    body.extend_from_slice(&buf[..n]);
                } else {
                    busy = true;
                    body = Vec::new();
                }
            }
            self.inner.consume(n);
            remaining -= n;
        };
        self.budget.give_back(held);
        result?;
        if busy {
            return Ok(Some(Frame::Busy(len)));
        }
        Ok(Some(Frame::Message(body)))
    }
}

/// Writes one message in `framing` and flushes.
/// Appends one frame of `body` in `framing` to `out` (the writer batches queued frames into one
/// write: a reply and its newline in one syscall, and every reply waiting in one).
pub fn push_frame(out: &mut Vec<u8>, framing: Framing, body: &[u8]) {
    match framing {
        Framing::Ndjson => {
            out.extend_from_slice(body);
            out.push(b'\n');
        }
        Framing::Lsp => {
            out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
        }
    }
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    framing: Framing,
    body: &[u8],
) -> std::io::Result<()> {
    match framing {
        Framing::Ndjson => {
            w.write_all(body).await?;
            w.write_all(b"\n").await?;
        }
        Framing::Lsp => {
            w.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
                .await?;
            w.write_all(body).await?;
        }
    }
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn frames(input: &[u8], max: usize) -> (Vec<Frame>, Option<Framing>) {
        let mut r = FrameReader::new(
            BufReader::with_capacity(7, input),
            None,
            max,
            FrameBudget::new(usize::MAX),
        );
        let mut out = Vec::new();
        while let Some(f) = r.next().await.unwrap() {
            out.push(f);
        }
        (out, r.framing())
    }

    #[tokio::test]
    async fn ndjson_lines_and_oversized_lines() {
        let (f, framing) = frames(b"  {\"a\":1}\r\n{\"b\":22222222222222}\n[1]\n", 12).await;
        assert_eq!(framing, Some(Framing::Ndjson));
        assert_eq!(
            f,
            vec![
                Frame::Message(b"{\"a\":1}".to_vec()),
                Frame::Oversized(20),
                Frame::Message(b"[1]".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn lsp_frames_bad_headers_and_a_length_over_the_limit() {
        let input = b"Content-Length: 7\r\n\r\n{\"a\":1}X: y\r\n\r\nContent-Length: 2\r\n\r\n[]Content-Length: 30\r\n\r\n{\"b\":2222222222222222222222222}";
        let (f, framing) = frames(input, 20).await;
        assert_eq!(framing, Some(Framing::Lsp));
        assert_eq!(
            f[..4],
            [
                Frame::Message(b"{\"a\":1}".to_vec()),
                Frame::BadHeader("missing Content-Length header".into()),
                Frame::Message(b"[]".to_vec()),
                Frame::TooLarge(30),
            ]
        );
        let (f, _) = frames(b"Content-Length: 18446744073709551616\r\n\r\n{}", 20).await;
        assert_eq!(f[0], Frame::TooLarge(usize::MAX));
    }

    #[tokio::test]
    async fn a_short_length_resynchronises_on_the_next_header() {
        // The first length is 5 for a 7-byte body: the body is cut, the stray `1}` precedes
        // the next header on the same line.
        let input = b"Content-Length: 5\r\n\r\n{\"a\":1}Content-Length: 7\r\n\r\n{\"b\":2}";
        let (f, _) = frames(input, 100).await;
        assert_eq!(
            f,
            vec![
                Frame::Message(b"{\"a\":".to_vec()),
                Frame::Message(b"{\"b\":2}".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn frames_beyond_the_shared_budget_are_skipped_as_busy() {
        let budget = FrameBudget::new(10);
        let input: &[u8] = b"{\"a\":\"0123456789\"}\n{}\n";
        let mut r = FrameReader::new(
            BufReader::with_capacity(4, input),
            None,
            100,
            budget.clone(),
        );
        assert_eq!(r.next().await.unwrap(), Some(Frame::Busy(18)));
        assert_eq!(
            r.next().await.unwrap(),
            Some(Frame::Message(b"{}".to_vec()))
        );
        assert_eq!(budget.used.load(Ordering::SeqCst), 0, "all given back");
    }

    // Paused time: the timers fire as soon as nothing else can run, so the test waits for no
    // wall clock and cannot flake on a slow machine.
    #[tokio::test(start_paused = true)]
    async fn a_started_frame_that_stalls_times_out_and_an_idle_stream_does_not() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(
            BufReader::new(server),
            None,
            1000,
            FrameBudget::new(usize::MAX),
        )
        .with_idle_timeout(Some(std::time::Duration::from_millis(50)));
        // Idle between frames: no timeout (the read is still pending after 200 ms).
        let pending = tokio::time::timeout(std::time::Duration::from_millis(200), r.next()).await;
        assert!(pending.is_err());
        client.write_all(b"{\"a\":").await.unwrap();
        let err = r.next().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }

    // A client trickling a byte every 10 ms never trips the idle timeout, but its frame has a
    // budget from its first byte: past it the stream ends, in both framings; a frame that
    // arrives within its budget is read, and the budget starts again with the next frame.
    #[tokio::test(start_paused = true)]
    async fn a_frame_trickling_past_its_budget_times_out_however_steady_its_bytes() {
        for (first, trickle) in [
            (
                b"{}\n".as_slice(),
                b"{\"a\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx".as_slice(),
            ),
            (
                b"Content-Length: 2\r\n\r\n{}",
                b"Content-Length: 50\r\n\r\n{\"a\":\"xxxxxxxxxxxxxxxxxxxxxxx",
            ),
        ] {
            let (mut client, server) = tokio::io::duplex(1024);
            let mut r = FrameReader::new(
                BufReader::new(server),
                None,
                1000,
                FrameBudget::new(usize::MAX),
            )
            .with_idle_timeout(Some(std::time::Duration::from_millis(50)))
            .with_deadline(Some(std::time::Duration::from_millis(200)));
            client.write_all(first).await.unwrap();
            assert!(matches!(r.next().await.unwrap(), Some(Frame::Message(_))));
            let sender = tokio::spawn(async move {
                for b in trickle {
                    if client.write_all(&[*b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                // Keep the stream open: the reader must give up on its own.
                std::future::pending::<()>().await;
            });
            let started = tokio::time::Instant::now();
            let err = r.next().await.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
            assert!(
                err.to_string().contains("200 ms after its first byte"),
                "{err} after {:?} ({})",
                started.elapsed(),
                String::from_utf8_lossy(first)
            );
            let took = started.elapsed();
            assert!(
                took >= std::time::Duration::from_millis(190)
                    && took <= std::time::Duration::from_millis(260),
                "{took:?}"
            );
            sender.abort();
        }
    }

    #[tokio::test]
    async fn progress_reports_a_frame_in_progress_and_nothing_between_frames() {
        let progress = Arc::new(FrameProgress::default());
        let (mut client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(
            BufReader::new(server),
            None,
            1000,
            FrameBudget::new(usize::MAX),
        )
        .with_progress(Some(progress.clone()));
        client.write_all(b"{\"a\":1}\n{\"b\":").await.unwrap();
        assert_eq!(
            r.next().await.unwrap(),
            Some(Frame::Message(b"{\"a\":1}".to_vec()))
        );
        assert_eq!(progress.age(), None, "between frames");
        let next = tokio::spawn(async move { r.next().await });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while progress.age().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the half frame is seen"
            );
            tokio::task::yield_now().await;
        }
        client.write_all(b"2}\n").await.unwrap();
        assert_eq!(
            next.await.unwrap().unwrap(),
            Some(Frame::Message(b"{\"b\":2}".to_vec()))
        );
        assert_eq!(progress.age(), None, "the frame ended");
    }

    #[tokio::test(start_paused = true)]
    async fn an_lsp_header_reserves_no_budget_before_its_body_arrives() {
        let budget = FrameBudget::new(100);
        let (mut client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(BufReader::new(server), None, 1000, budget.clone());
        client
            .write_all(b"Content-Length: 90\r\n\r\n{")
            .await
            .unwrap();
        let next = tokio::spawn(async move { r.next().await });
        // The reader has taken what arrived once the body's first byte is charged.
        for _ in 0..10_000 {
            if budget.used.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            budget.used.load(Ordering::SeqCst),
            1,
            "only what arrived is charged"
        );
        assert!(budget.take(99), "the rest of the budget is free for others");
        budget.give_back(99);
        drop(client);
        assert!(next.await.unwrap().is_err(), "end of input inside the body");
        assert_eq!(budget.used.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn writes_both_framings() {
        let mut out = Vec::new();
        write_frame(&mut out, Framing::Lsp, b"{}").await.unwrap();
        write_frame(&mut out, Framing::Ndjson, b"{}").await.unwrap();
        assert_eq!(out, b"Content-Length: 2\r\n\r\n{}{}\n");
    }
}
