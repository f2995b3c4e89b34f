//! Any bytes from a client, in either framing or auto-detected, with a small frame limit: the
//! reader must never panic, must end at end of input, and must never hand out a message larger
//! than the limit.
#![no_main]

use std::sync::OnceLock;

use compactd::transport::framing::{Frame, FrameReader, Framing};
use libfuzzer_sys::fuzz_target;

const MAX_FRAME: usize = 512;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    for framing in [None, Some(Framing::Ndjson), Some(Framing::Lsp)] {
        runtime().block_on(async {
            let mut reader = FrameReader::new(data, framing, MAX_FRAME);
            // Every frame consumes at least one byte, so this bounds the loop.
            for _ in 0..=data.len() + 1 {
                match reader.next().await {
                    Ok(Some(Frame::Message(m))) => assert!(m.len() <= MAX_FRAME),
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return,
                }
            }
            panic!(
                "the frame reader did not reach the end of {} bytes",
                data.len()
            );
        });
    }
});
