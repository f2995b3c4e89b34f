//! A configuration file, any text: loading it never panics, and a configuration that loads says
//! only what makes sense (issue: reliability round three). Every configured price is finite and
//! not negative, and a daemon built from it has a namespace and an idle time that are usable.
#![no_main]

use compactd::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::from_toml(text, std::path::Path::new("fuzz.toml")) else {
        return;
    };
    // Every model id the file names a price for: the lookup must give sensible numbers.
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("[prices.") else {
            continue;
        };
        let id = rest.trim_end_matches(']').trim_matches('"');
        let (provider, model) = match id.split_once('/') {
            Some((p, m)) => (Some(p), m),
            None => (None, id),
        };
        if let Some(p) = config.prices.lookup(provider, model) {
            for v in [p.input, p.output, p.cache_read, p.cache_write] {
                assert!(v.is_finite() && v >= 0.0, "price {v} of {id} accepted");
            }
        }
    }
    assert!(!config.storage.namespace().is_empty());
    let _ = config.idle_exit();
    let _ = config.storage.limits();
});
