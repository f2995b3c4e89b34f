//! Message framing on a byte stream (protocol.md §2): newline-delimited JSON, or LSP-style
//! `Content-Length` headers, detected per connection from the first non-whitespace byte.
//!
//! Frames over the size limit are skipped (to the next newline, or past `Content-Length`
//! bytes) and reported as [`Frame::Oversized`], so the connection stays usable and memory stays
//! bounded whatever a client sends.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// Default largest frame accepted: 64 MiB.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

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
    /// A frame larger than the limit was skipped; carries its size (as far as known).
    Oversized(usize),
    /// LSP headers that could not be understood (the reader resynchronises on the next header).
    BadHeader(String),
}

/// Reads frames from a buffered stream.
pub struct FrameReader<R> {
    inner: R,
    framing: Option<Framing>,
    max_frame: usize,
}

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    /// `framing: None` detects it from the first message.
    pub fn new(inner: R, framing: Option<Framing>, max_frame: usize) -> Self {
        FrameReader {
            inner,
            framing,
            max_frame,
        }
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
        let Some(first) = self.peek_non_ws().await? else {
            return Ok(None);
        };
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

    /// Reads up to and excluding the next `\n`, enforcing the limit.
    async fn read_line(&mut self) -> std::io::Result<Frame> {
        let mut out = Vec::new();
        let mut size = 0usize;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                break;
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            size += chunk.len();
            if size <= self.max_frame {
                out.extend_from_slice(chunk);
            } else if !out.is_empty() {
                out = Vec::new();
            }
            let consumed = done.unwrap_or(buf.len());
            self.inner.consume(consumed);
            if done.is_some() {
                break;
            }
        }
        if size > self.max_frame {
            return Ok(Frame::Oversized(size));
        }
        if out.last() == Some(&b'\r') {
            out.pop();
        }
        Ok(Frame::Message(out))
    }

    /// Reads one header line (without CRLF); `None` at EOF.
    async fn header_line(&mut self) -> std::io::Result<Option<String>> {
        let mut line = Vec::new();
        let n = tokio::io::AsyncReadExt::take(&mut self.inner, 8192)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
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
            let Some(line) = self.header_line().await? else {
                return Ok(None);
            };
            if line.is_empty() {
                break;
            }
            match line.split_once(':') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                    match value.trim().parse::<usize>() {
                        Ok(n) => length = Some(n),
                        Err(_) => bad = Some(format!("invalid Content-Length: {}", value.trim())),
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
            let mut remaining = len as u64;
            while remaining > 0 {
                let buf = self.inner.fill_buf().await?;
                if buf.is_empty() {
                    break;
                }
                let n = (buf.len() as u64).min(remaining) as usize;
                self.inner.consume(n);
                remaining -= n as u64;
            }
            return Ok(Some(Frame::Oversized(len)));
        }
        let mut body = vec![0u8; len];
        tokio::io::AsyncReadExt::read_exact(&mut self.inner, &mut body).await?;
        Ok(Some(Frame::Message(body)))
    }
}

/// Writes one message in `framing` and flushes.
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
        let mut r = FrameReader::new(BufReader::with_capacity(7, input), None, max);
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
    async fn lsp_frames_bad_headers_and_oversized_bodies() {
        let input = b"Content-Length: 7\r\n\r\n{\"a\":1}Content-Length: 30\r\nContent-Type: x\r\n\r\n{\"b\":2222222222222222222222222}X: y\r\n\r\nContent-Length: 2\r\n\r\n[]";
        let (f, framing) = frames(input, 20).await;
        assert_eq!(framing, Some(Framing::Lsp));
        assert_eq!(
            f,
            vec![
                Frame::Message(b"{\"a\":1}".to_vec()),
                Frame::Oversized(30),
                Frame::BadHeader("missing Content-Length header".into()),
                Frame::Message(b"[]".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn writes_both_framings() {
        let mut out = Vec::new();
        write_frame(&mut out, Framing::Lsp, b"{}").await.unwrap();
        write_frame(&mut out, Framing::Ndjson, b"{}").await.unwrap();
        assert_eq!(out, b"Content-Length: 2\r\n\r\n{}{}\n");
    }
}
