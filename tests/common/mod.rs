//! The scripted provider helpers under their older module name: the server itself lives in
//! `tests/support/fake_llm.rs` (one fake for every suite); this module only re-exports it, so
//! suites that say `mod common;` keep working.
#![allow(unused_imports)]

#[path = "../support/mod.rs"]
mod support;

pub use support::fake_llm::{
    data, event, js_len, refused_port, Ending, Fault, MockServer, Recorded, Scripted,
};
pub use support::{conformance_cases, conformance_dir, in_ci, recorded_requests, skip_or_fail};
