//! The documentation stays true to the code and to the repository:
//! - the method lists of the README and of the client READMEs (between `<!-- methods -->`
//!   markers) name exactly the methods of `proto-docs/openrpc.json` (snake_case for Python);
//! - no document links outside the repository or to a file that does not exist, and none names
//!   the product contract's path or the shared folder beside the checkout as a link target;
//! - the README labels its two commands "Run it" and "Test it".

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn protocol_methods() -> BTreeSet<String> {
    let doc: serde_json::Value = serde_json::from_str(&read("proto-docs/openrpc.json")).unwrap();
    doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect()
}

fn snake(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The backticked names between the `<!-- methods -->` markers of a document.
fn listed_methods(rel: &str) -> BTreeSet<String> {
    let text = read(rel);
    let start = text
        .find("<!-- methods -->")
        .unwrap_or_else(|| panic!("{rel} has no <!-- methods --> list"));
    let end = text[start..]
        .find("<!-- /methods -->")
        .map(|e| start + e)
        .unwrap_or_else(|| panic!("{rel}: unclosed <!-- methods --> list"));
    text[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn method_lists_name_exactly_the_protocols_methods() {
    let methods = protocol_methods();
    assert!(methods.len() >= 29, "{methods:?}");
    assert_eq!(listed_methods("README.md"), methods, "README.md");
    assert_eq!(
        listed_methods("clients/typescript/README.md"),
        methods,
        "clients/typescript/README.md"
    );
    let python: BTreeSet<String> = methods.iter().map(|m| snake(m)).collect();
    assert_eq!(
        listed_methods("clients/python/README.md"),
        python,
        "clients/python/README.md"
    );
}

/// Every Markdown document a reader of the repository sees.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for dir in ["proto-docs", "benches", "fuzz"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            docs.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "md")),
            );
        }
    }
    for client in ["python", "typescript", "nvim", "pi-extension"] {
        docs.push(root.join("clients").join(client).join("README.md"));
    }
    docs.retain(|p| p.exists());
    docs
}

/// The targets of the `[text](target)` links of a Markdown text.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_owned());
        }
    }
    out
}

#[test]
fn no_document_links_outside_the_repository_or_to_a_missing_file() {
    let root = std::fs::canonicalize(ROOT).unwrap();
    let mut problems = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        // Developer notes (benches, fuzz) may name the shared inputs in commands; the user's
        // documents may not.
        let for_users = !name.starts_with("benches") && !name.starts_with("fuzz");
        for bad in ["design/protocol.md", "../shared"] {
            if for_users && text.contains(bad) {
                problems.push(format!(
                    "{name} mentions {bad}, which is not in the repository"
                ));
            }
        }
        for target in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with('#')
            {
                continue;
            }
            let path = target.split('#').next().unwrap_or("");
            let resolved = doc.parent().unwrap().join(path);
            match std::fs::canonicalize(&resolved) {
                Ok(p) if p.starts_with(&root) => {}
                Ok(p) => problems.push(format!(
                    "{name}: link {target} leaves the repository ({})",
                    p.display()
                )),
                Err(_) => problems.push(format!("{name}: link {target} points to nothing")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check can fail: a link to the contract would be caught.
    assert_eq!(
        links("see [the contract](../shared/design/protocol.md)."),
        ["../shared/design/protocol.md"]
    );
}

#[test]
fn the_readme_labels_its_two_commands() {
    let text = read("README.md");
    let run = text.find("**Run it**").expect("a \"Run it\" label");
    let test = text.find("**Test it**").expect("a \"Test it\" label");
    let serve = text
        .find("cargo run --release -- serve")
        .expect("the run command");
    let all = text
        .find("bash scripts/test-all")
        .expect("the test command");
    assert!(
        run < serve && serve < test && test < all,
        "each label precedes its command"
    );
}

/// The README's CLI synopsis is the CLI's: it names every subcommand `compactd --help` lists,
/// and every `--flag` it shows for a subcommand is one that subcommand's `--help` lists (a
/// synopsis that drifted once left out six subcommands and a flag).
#[test]
fn the_readme_synopsis_matches_the_cli() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_compactd"))
            .args(args)
            .arg("--help")
            .output()
            .expect("run compactd --help");
        assert!(out.status.success(), "{args:?} --help");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let top = help(&[]);
    let subcommands: Vec<String> = top
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("Options:").next())
        .expect("a Commands section")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help")
        .map(str::to_owned)
        .collect();
    assert!(subcommands.len() >= 10, "{subcommands:?}");
    let readme = read("README.md");
    let cli = readme.split("## CLI").nth(1).expect("a CLI section");
    let block = cli
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the synopsis block");
    let mut current = String::new();
    let mut named = BTreeSet::new();
    for line in block.lines() {
        let code = line.split('#').next().unwrap_or("");
        if let Some(rest) = code.trim_start().strip_prefix("compactd ") {
            current = rest.split_whitespace().next().unwrap_or("").to_owned();
            named.insert(current.clone());
        }
        if current.is_empty() || !code.contains("--") {
            continue;
        }
        let flags = help(&[current.as_str()]);
        for flag in code
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
        {
            assert!(
                flags.contains(flag),
                "the synopsis shows `{flag}` for `{current}`, which its --help does not list"
            );
        }
    }
    for sub in &subcommands {
        assert!(
            named.contains(sub),
            "the README synopsis leaves out `compactd {sub}`"
        );
    }
}

/// ARCHITECTURE.md's "Adding things" names the files each change touches: each path it names
/// exists (but the new files it tells you to write, `NAME.rs` and `redis.rs`), and each method
/// of the protocol is one line of `src/rpc/methods.rs`, the one place the guide says to add it.
#[test]
fn the_architecture_guide_names_files_that_exist_and_every_method_once() {
    let arch = read("ARCHITECTURE.md");
    let guide = arch
        .split("## Adding things")
        .nth(1)
        .expect("ARCHITECTURE.md has an \"Adding things\" section");
    let named: Vec<&str> = guide
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            (w.starts_with("src/")
                || w.starts_with("tests/")
                || w.starts_with("clients/")
                || w.starts_with("proto-docs/"))
                && !w.contains("NAME")
                && !w.contains("redis")
                && !w.ends_with('/')
        })
        .collect();
    assert!(named.len() >= 15, "the guide names its files: {named:?}");
    let missing: Vec<&&str> = named
        .iter()
        .filter(|p| !Path::new(ROOT).join(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names missing files: {missing:?}"
    );
    let methods_rs = read("src/rpc/methods.rs");
    for method in protocol_methods() {
        let lines = methods_rs
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("\"{method}\" =>")))
            .count();
        assert_eq!(
            lines, 1,
            "{method} is declared {lines} times in src/rpc/methods.rs"
        );
    }
}

/// Every key of the configuration (the `Config` struct's fields, nested tables included)
/// appears in the README's configuration sample, and the sample loads: a setting added to the
/// struct fails here until the README shows it. The struct's keys are read from serde itself:
/// every table refuses an unknown key by listing the keys it takes (`deny_unknown_fields`).
#[test]
fn the_readmes_config_sample_names_every_setting_and_loads() {
    use compactd::config::Config;
    let readme = read("README.md");
    let section = &readme[readme
        .find("## Configuration")
        .expect("a Configuration section")..];
    let sample = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in the Configuration section");
    Config::from_toml(sample, Path::new("README.md"))
        .unwrap_or_else(|e| panic!("the README's sample does not load: {e}"));

    const PROBE: &str = "zz_no_such_key";
    // The error of a config with an unknown key in the table at `path` (`*`: a map's entry).
    let refusal = |path: &[String]| -> String {
        let table: Vec<&str> = path
            .iter()
            .map(|p| if p == "*" { "k" } else { p.as_str() })
            .collect();
        let text = if table.is_empty() {
            format!("{PROBE} = 1\n")
        } else {
            format!("[{}]\n{PROBE} = 1\n", table.join("."))
        };
        match Config::from_toml(&text, Path::new("probe.toml")) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    };
    // The keys the table at `path` takes, when it is one that refuses unknown keys.
    let keys_of = |path: &[String]| -> Option<Vec<String>> {
        let said = refusal(path);
        let expected = said.split(&format!("unknown field `{PROBE}`")).nth(1)?;
        let names = expected.lines().next().unwrap_or("");
        Some(
            names
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect(),
        )
    };
    let mut wanted = Vec::new();
    let mut tables = vec![Vec::<String>::new()];
    while let Some(path) = tables.pop() {
        for key in keys_of(&path).unwrap_or_default() {
            let mut at = path.clone();
            at.push(key);
            wanted.push(at.join("."));
            if keys_of(&at).is_some() {
                tables.push(at);
            } else {
                let mut entry = at.clone();
                entry.push("*".into());
                if keys_of(&entry).is_some() {
                    tables.push(entry);
                }
            }
        }
    }
    assert!(
        wanted.len() > 20 && wanted.contains(&"providers.*.api".to_owned()),
        "read too little of the struct: {wanted:?}"
    );
    // The sample's key paths, its maps' keys as `*`.
    let value: toml::Value = toml::from_str(sample).expect("the sample is TOML");
    fn keys(v: &toml::Value, at: &str, maps: &[&str], out: &mut Vec<String>) {
        if let toml::Value::Table(t) = v {
            for (k, v) in t {
                let name = if maps.contains(&at) { "*" } else { k.as_str() };
                let path = if at.is_empty() {
                    name.to_owned()
                } else {
                    format!("{at}.{name}")
                };
                out.push(path.clone());
                keys(v, &path, maps, out);
            }
        }
    }
    let mut shown = Vec::new();
    keys(&value, "", &["providers", "prices"], &mut shown);
    let missing: Vec<&String> = wanted.iter().filter(|p| !shown.contains(p)).collect();
    assert!(
        missing.is_empty(),
        "README.md's configuration sample does not show {missing:?}"
    );
}
