//! Properties of the framing codec, in both framings: however the byte stream is split into
//! reads, a valid stream decodes to exactly the messages that were encoded; and arbitrary bytes
//! never panic the reader, which always reaches the end of its input.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use compactd::transport::framing::{write_frame, Frame, FrameBudget, FrameReader, Framing};
use proptest::prelude::*;
use tokio::io::{AsyncRead, BufReader, ReadBuf};

/// A reader that hands out its bytes in the given chunk sizes (cycling).
struct Chunked {
    data: Vec<u8>,
    sizes: Vec<usize>,
    pos: usize,
    turn: usize,
    /// How many bytes the reader has handed out, readable after it moved into the decoder.
    consumed: Arc<AtomicUsize>,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let want = this.sizes[this.turn % this.sizes.len()].max(1);
        this.turn += 1;
        let n = want.min(buf.remaining()).min(this.data.len() - this.pos);
        buf.put_slice(&this.data[this.pos..this.pos + n]);
        this.pos += n;
        this.consumed.store(this.pos, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

/// How decoding stopped.
#[derive(Debug, PartialEq)]
enum End {
    /// The input ran out, after this many of its bytes were read.
    Eof { consumed: usize, len: usize },
    /// The reader gave up on the stream (the connection would be closed).
    Refused,
}

async fn decode(
    data: Vec<u8>,
    sizes: Vec<usize>,
    framing: Option<Framing>,
    max: usize,
) -> (Vec<Frame>, End) {
    let len = data.len();
    let consumed = Arc::new(AtomicUsize::new(0));
    let reader = Chunked {
        data,
        sizes,
        pos: 0,
        turn: 0,
        consumed: consumed.clone(),
    };
    let mut frames = FrameReader::new(
        BufReader::with_capacity(16, reader),
        framing,
        max,
        FrameBudget::new(usize::MAX),
    );
    let mut out = Vec::new();
    // Every frame consumes input, so this ends; the cap turns a hang into a failure.
    for _ in 0..10_000 {
        match frames.next().await {
            Ok(Some(f)) => out.push(f),
            Ok(None) => {
                let consumed = consumed.load(Ordering::SeqCst);
                return (out, End::Eof { consumed, len });
            }
            Err(_) => return (out, End::Refused),
        }
    }
    panic!("the reader did not reach the end of its input");
}

fn messages() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        (any::<String>(), any::<i64>()).prop_map(|(s, n)| {
            serde_json::json!({"jsonrpc": "2.0", "id": n, "method": s, "params": {"text": s}})
                .to_string()
        }),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_split_of_a_valid_stream_decodes_to_the_same_messages(
        msgs in messages(),
        sizes in prop::collection::vec(1usize..40, 1..10),
        lsp in any::<bool>(),
        forced in any::<bool>(),
    ) {
        let framing = if lsp { Framing::Lsp } else { Framing::Ndjson };
        let rt = runtime();
        let frames = rt.block_on(async {
            let mut stream = Vec::new();
            for m in &msgs {
                write_frame(&mut stream, framing, m.as_bytes()).await.unwrap();
            }
            decode(stream, sizes, forced.then_some(framing), 1 << 20).await
        });
        let (frames, end) = frames;
        let expected: Vec<Frame> = msgs.iter().map(|m| Frame::Message(m.as_bytes().to_vec())).collect();
        prop_assert_eq!(frames, expected);
        prop_assert!(matches!(end, End::Eof { consumed, len } if consumed == len), "a valid stream is read to its end: {:?}", end);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_reach_the_end(
        data in prop::collection::vec(any::<u8>(), 0..3000),
        sizes in prop::collection::vec(1usize..64, 1..6),
        framing in prop::option::of(prop::bool::ANY.prop_map(|l| if l { Framing::Lsp } else { Framing::Ndjson })),
    ) {
        let rt = runtime();
        let (frames, end) = rt.block_on(decode(data.clone(), sizes, framing, 256));
        // Either every byte was read, or the reader refused the stream (closing it): it never
        // stops early on its own, and never hangs (the cap in `decode`).
        if let End::Eof { consumed, len } = end {
            prop_assert_eq!(consumed, len, "stopped before the end of its input");
        }
        for f in &frames {
            if let Frame::Message(m) = f {
                prop_assert!(m.len() <= 256, "a frame over the limit was returned");
            }
        }
    }

    #[test]
    fn header_like_noise_before_valid_frames_never_loses_the_frames_after_a_blank_line(
        noise in "[a-zA-Z:{}\" ]{0,40}",
        msgs in messages(),
    ) {
        // Stray bytes, then a blank line, then valid LSP frames: every frame is decoded.
        let rt = runtime();
        let frames = rt.block_on(async {
            let mut stream = format!("Content-Length: 2\r\n\r\n{{}}{noise}\r\n\r\n").into_bytes();
            for m in &msgs {
                write_frame(&mut stream, Framing::Lsp, m.as_bytes()).await.unwrap();
            }
            decode(stream, vec![7], None, 1 << 20).await.0
        });
        let decoded: Vec<&Frame> = frames.iter().filter(|f| matches!(f, Frame::Message(m) if m != b"{}")).collect();
        let expected: Vec<Frame> = msgs.iter().map(|m| Frame::Message(m.as_bytes().to_vec())).collect();
        prop_assert_eq!(decoded, expected.iter().collect::<Vec<_>>());
    }
}
