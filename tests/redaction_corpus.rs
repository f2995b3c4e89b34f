//! Redaction measured on a labelled corpus: every secret must be caught and no near-miss may
//! change. The corpus (`tests/redaction_corpus/`) holds fake secrets that look real but are
//! random (provider keys, cloud keys, tokens in URLs and headers, JWTs, private keys, passwords in
//! connection strings, secrets in JSON/YAML/env/TOML assignments, high-entropy values in
//! secret-named fields) and near-misses from realistic code (identifiers and fields named
//! key/token/secret/password, environment variable names, placeholders and elided examples, git
//! hashes, UUIDs, checksums, base64 test data, type annotations). It prints precision and recall.

use std::collections::BTreeSet;
use std::path::PathBuf;

use compactd::summarizer::redact::{redact, RedactionConfig, REDACTED};
use serde_json::Value;

fn corpus(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/redaction_corpus")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{file}:{}: not JSON: {e}", n + 1))
        })
        .collect()
}

fn field<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("corpus entry without {key}: {v}"))
}

#[test]
fn every_secret_is_caught_and_no_near_miss_changes() {
    let secrets = corpus("secrets.jsonl");
    let near = corpus("near_misses.jsonl");
    let kinds: BTreeSet<&str> = secrets.iter().map(|s| field(s, "kind")).collect();
    assert!(secrets.len() >= 100, "only {} secrets", secrets.len());
    assert!(kinds.len() >= 15, "only {} kinds of secret", kinds.len());
    assert!(near.len() >= 200, "only {} near-misses", near.len());

    let mut missed = Vec::new();
    for s in &secrets {
        let (text, secret) = (field(s, "text"), field(s, "secret"));
        assert!(
            text.contains(secret),
            "corpus error: {secret:?} not in {text:?}"
        );
        let out = redact(text);
        if out.contains(secret) || !out.contains(REDACTED) {
            missed.push(format!("[{}] {text:?} -> {out:?}", field(s, "kind")));
        }
        assert_eq!(redact(&out), out, "not idempotent on {text:?}");
    }
    let mut changed = Vec::new();
    for n in &near {
        let text = field(n, "text");
        let out = redact(text);
        if out != text {
            changed.push(format!("[{}] {text:?} -> {out:?}", field(n, "kind")));
        }
    }

    let caught = secrets.len() - missed.len();
    let recall = caught as f64 / secrets.len() as f64;
    let precision = caught as f64 / (caught + changed.len()).max(1) as f64;
    println!(
        "redaction corpus: {} secrets of {} kinds, {} near-misses; recall {:.1}% ({caught}/{}), precision {:.1}% ({} near-misses changed)",
        secrets.len(),
        kinds.len(),
        near.len(),
        100.0 * recall,
        secrets.len(),
        100.0 * precision,
        changed.len()
    );
    assert!(
        missed.is_empty() && changed.is_empty(),
        "missed secrets:\n{}\nchanged near-misses:\n{}",
        missed.join("\n"),
        changed.join("\n")
    );
}

#[test]
fn the_config_applies_the_same_rules() {
    // The configured path (what compaction uses) agrees with `redact` when no patterns are set,
    // and redaction off leaves every secret in place.
    let on = RedactionConfig::default();
    let off = RedactionConfig::disabled();
    for s in corpus("secrets.jsonl") {
        let text = field(&s, "text");
        assert_eq!(on.apply(text), redact(text));
        assert_eq!(off.apply(text), text);
    }
}
