//! Keeps `proto-docs/openrpc.json` in step with the code.
//!
//! `cargo test --test openrpc` fails when the committed document differs from
//! `compactd::rpc::openrpc::document()`; `COMPACTD_BLESS=1 cargo test --test openrpc` rewrites it.
//! It also checks that the document describes exactly the methods of the dispatch table.

use std::collections::BTreeSet;
use std::path::PathBuf;

use compactd::config::Config;
use compactd::daemon::methods::Ctx;
use compactd::daemon::Daemon;
use compactd::rpc::openrpc;
use compactd::transport::dispatch::Dispatcher;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto-docs/openrpc.json")
}

fn dispatcher_methods() -> BTreeSet<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let daemon = Daemon::new(Config::default());
        let (conn, _rx) = daemon.connect();
        let dispatcher = Dispatcher::new(Ctx {
            daemon: daemon.clone(),
            conn: conn.clone(),
        });
        let names = dispatcher
            .method_names()
            .into_iter()
            .map(str::to_owned)
            .collect();
        daemon.disconnect(&conn);
        names
    })
}

#[test]
fn document_lists_exactly_the_dispatched_methods() {
    let doc = openrpc::document();
    let documented: BTreeSet<String> = doc["methods"]
        .as_array()
        .expect("methods array")
        .iter()
        .map(|m| m["name"].as_str().expect("method name").to_owned())
        .collect();
    let dispatched = dispatcher_methods();
    let missing: Vec<&String> = dispatched.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&dispatched).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "OpenRPC document out of step with the dispatcher: undocumented {missing:?}, not dispatched {extra:?} (edit src/rpc/openrpc.rs)"
    );
}

#[test]
fn document_is_well_formed() {
    let doc = openrpc::document();
    assert_eq!(doc["openrpc"], "1.3.2");
    let schemas = doc["components"]["schemas"]
        .as_object()
        .expect("components.schemas");
    // Every `$ref` resolves to a component.
    fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(serde_json::Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {r}"));
        assert!(schemas.contains_key(name), "dangling $ref {r}");
    }
    for m in doc["methods"].as_array().unwrap() {
        assert_eq!(m["paramStructure"], "by-name", "{}", m["name"]);
        for p in m["params"].as_array().unwrap() {
            assert!(p["required"].is_boolean(), "{}.{}", m["name"], p["name"]);
        }
    }
    // Every error kind appears in the table.
    let table = doc["x-errors"].as_array().unwrap();
    for k in compactd::rpc::ErrorKind::ALL {
        assert!(
            table
                .iter()
                .any(|e| e["code"] == k.code() && e["kind"] == k.as_str()),
            "{k:?} missing from x-errors"
        );
    }
    // Deterministic.
    assert_eq!(openrpc::document_text(), openrpc::document_text());
}

#[test]
fn committed_document_is_current() {
    let fresh = openrpc::document_text();
    let path = committed_path();
    if std::env::var("COMPACTD_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).expect("create proto-docs/");
        std::fs::write(&path, &fresh).expect("write proto-docs/openrpc.json");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let line = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || committed.lines().count().min(fresh.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "proto-docs/openrpc.json is out of date (first difference at line {line}).\n\
             Regenerate it with:\n    COMPACTD_BLESS=1 cargo test --test openrpc\n\
             and commit the result."
        );
    }
}
