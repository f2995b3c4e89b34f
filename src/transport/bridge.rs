//! `compactd connect`'s byte pump: stdin to the daemon's socket and the socket to stdout,
//! unchanged, so whatever framing the client speaks (LSP `Content-Length` or NDJSON) reaches the
//! daemon as it was written, and the daemon detects it per connection as usual.
//!
//! Closing follows the daemon's half-close rule: at the end of stdin the socket's write side is
//! shut down, and replies keep flowing to stdout until the daemon has answered everything and
//! closes the connection. When the daemon goes away first, the bridge ends too (stdout closes,
//! which an editor sees as its server exiting).

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

/// Copies `input` → `socket` and `socket` → `output` until the daemon closes the connection.
/// Returns how many bytes went each way.
pub async fn pump<R, W>(socket: UnixStream, input: R, output: W) -> std::io::Result<(u64, u64)>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (mut from_daemon, mut to_daemon) = socket.into_split();
    let (mut input, mut output) = (input, output);
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
    // The connection is over when the daemon's side ends; input may stay open forever (an
    // editor keeps its pipe), so it is not awaited past that.
    let mut sent = None;
    loop {
        tokio::select! {
            n = &mut upstream, if sent.is_none() => sent = Some(n.unwrap_or(0)),
            n = &mut downstream => return Ok((sent.unwrap_or(0), n?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

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
        let bridge = tokio::spawn(pump(socket, client_in, out));
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
        let (up, down) = bridge.await.unwrap().unwrap();
        assert_eq!((up, down), (frame.len() as u64, (frame.len() + 6) as u64));
    }
}
