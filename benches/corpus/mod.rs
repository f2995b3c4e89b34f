//! The quality corpus, shared by the benches that read it (`quality`, `handoff`): the compact
//! script format of `benches/quality/*.session` (see `benches/README.md`) turned into Pi
//! messages and session files, the probes a script plants, and how a probe is looked up in a
//! summary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The sections a probe can name, and the headings (history and turn-prefix layouts) that
/// count as that section.
pub const SECTIONS: [(&str, &[&str]); 8] = [
    ("goal", &["## Goal", "## Original Request"]),
    ("constraints", &["## Constraints & Preferences"]),
    ("done", &["### Done", "## Early Progress"]),
    ("in-progress", &["### In Progress"]),
    ("blocked", &["### Blocked"]),
    ("decisions", &["## Key Decisions"]),
    ("next", &["## Next Steps"]),
    (
        "critical",
        &["## Critical Context", "## Context for Suffix"],
    ),
];

/// One check on the final summary of a session. Texts may list alternatives with ` || `.
#[derive(Debug, Clone)]
pub enum Probe {
    /// Must appear somewhere in the summary.
    Fact(String),
    /// Must appear in the named section (also counts as a fact).
    In(String, String),
    /// Must not appear in Blocked or Next Steps (a fixed error, an abandoned approach).
    Stale(String),
    /// Must not appear in the named section (noise such as a greeting kept as the goal).
    NotIn(String, String),
    /// Must appear at most once (an injected prompt repeated).
    Once(String),
}

/// A parsed corpus script.
pub struct Script {
    pub name: String,
    pub title: String,
    pub keep_recent_tokens: i64,
    pub reserve_tokens: i64,
    pub focus: Option<String>,
    /// Messages per segment (a `compact` marker starts a new segment).
    pub segments: Vec<Vec<Value>>,
    pub probes: Vec<Probe>,
}

/// Unescapes `\n` and `\t` in script text.
fn unescape(s: &str) -> String {
    s.replace("\\n", "\n").replace("\\t", "\t")
}

/// Builds Pi messages from a script. Lines:
/// `user: …`, `assistant: …`, `think: …`, `call NAME {json}`, `result: …`, `error: …`,
/// `bash CODE COMMAND :: OUTPUT`, `custom TYPE: …`, `model-error: …`, `compact`, `@keep N`,
/// `@reserve N`, `@title …`, `@focus …`, and probes (`fact:`, `in SECTION:`, `stale:`,
/// `not-in SECTION:`, `once:`). `| …` continues the previous text on a new line.
pub fn parse_script(name: &str, text: &str) -> Result<Script, String> {
    let mut s = Script {
        name: name.to_string(),
        title: String::new(),
        keep_recent_tokens: 1,
        reserve_tokens: 16_384,
        focus: None,
        segments: vec![Vec::new()],
        probes: Vec::new(),
    };
    // Calls waiting for a result: (id, tool name).
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut next_id = 0u32;
    let mut ts = 1_767_000_000_000i64;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        let err = |m: &str| format!("{name}:{}: {m}: {line}", n + 1);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        ts += 1000;
        let seg = s.segments.last_mut().ok_or_else(|| err("no segment"))?;
        if let Some(rest) = line
            .strip_prefix("| ")
            .or(line.strip_prefix("|").filter(|r| r.is_empty()))
        {
            let last = seg.last_mut().ok_or_else(|| err("continuation first"))?;
            append_text(last, rest).ok_or_else(|| err("nothing to continue"))?;
            continue;
        }
        let (head, body) = match line.split_once(": ") {
            _ if line.starts_with('@') => line.split_once(' ').unwrap_or((line, "")),
            Some((h, b)) if !h.starts_with("call ") && !h.starts_with("bash ") => (h, b),
            _ => (line, ""),
        };
        let body = unescape(body);
        match head {
            "@title" => s.title = body,
            "@keep" => s.keep_recent_tokens = body.parse().map_err(|_| err("bad @keep"))?,
            "@reserve" => s.reserve_tokens = body.parse().map_err(|_| err("bad @reserve"))?,
            "@focus" => s.focus = Some(body),
            "user" => seg.push(
                json!({"role":"user","content":[{"type":"text","text":body}],"timestamp":ts}),
            ),
            "assistant" | "think" => {
                let block = if head == "think" {
                    json!({"type":"thinking","thinking":body})
                } else {
                    json!({"type":"text","text":body})
                };
                match seg.last_mut() {
                    Some(m)
                        if m["role"] == "assistant"
                            && head == "think"
                            && m["content"].as_array().is_some_and(|c| c.is_empty()) =>
                    {
                        push_block(m, block);
                    }
                    _ => seg.push(assistant(vec![block], ts)),
                }
            }
            "model-error" => {
                let mut m = assistant(vec![], ts);
                m["stopReason"] = json!("error");
                m["errorMessage"] = json!(body);
                seg.push(m);
            }
            "result" | "error" => {
                if pending.is_empty() {
                    return Err(err("result without a pending call"));
                }
                let (id, tool) = pending.remove(0);
                seg.push(json!({"role":"toolResult","toolCallId":id,"toolName":tool,"content":[{"type":"text","text":body}],"isError":head == "error","timestamp":ts}));
            }
            "compact" => s.segments.push(Vec::new()),
            h if h.starts_with("call ") => {
                let rest = &line["call ".len()..];
                let (tool, args) = rest.split_once(' ').unwrap_or((rest, "{}"));
                let args: Value = serde_json::from_str(args)
                    .map_err(|e| err(&format!("bad call arguments ({e})")))?;
                next_id += 1;
                let id = format!("call_{next_id:03}");
                let block = json!({"type":"toolCall","id":id,"name":tool,"arguments":args});
                match seg.last_mut() {
                    Some(m) if m["role"] == "assistant" && m["stopReason"] != "error" => {
                        push_block(m, block)
                    }
                    _ => seg.push(assistant(vec![block], ts)),
                }
                if let Some(m) = seg.last_mut() {
                    m["stopReason"] = json!("toolUse");
                }
                pending.push((id, tool.to_string()));
            }
            h if h.starts_with("bash ") => {
                let rest = &line["bash ".len()..];
                let (code, rest) = rest
                    .split_once(' ')
                    .ok_or_else(|| err("bash CODE COMMAND :: OUTPUT"))?;
                let code: i64 = code.parse().map_err(|_| err("bad exit code"))?;
                let (command, output) = rest.split_once(" :: ").unwrap_or((rest, ""));
                seg.push(json!({"role":"bashExecution","command":command,"output":unescape(output),"exitCode":code,"cancelled":false,"truncated":false,"timestamp":ts}));
            }
            h if h.starts_with("custom ") => {
                let kind = &h["custom ".len()..];
                seg.push(json!({"role":"custom","customType":kind,"content":body,"display":true,"timestamp":ts}));
            }
            "fact" => s.probes.push(Probe::Fact(body)),
            "stale" => s.probes.push(Probe::Stale(body)),
            "once" => s.probes.push(Probe::Once(body)),
            h if h.starts_with("in ") || h.starts_with("not-in ") => {
                let (kind, section) = h.split_once(' ').unwrap_or((h, ""));
                if !SECTIONS.iter().any(|(n, _)| *n == section) {
                    return Err(err("unknown section"));
                }
                let probe = if kind == "in" {
                    Probe::In(section.to_string(), body)
                } else {
                    Probe::NotIn(section.to_string(), body)
                };
                s.probes.push(probe);
            }
            _ => return Err(err("unknown line")),
        }
    }
    if !pending.is_empty() {
        return Err(format!("{name}: calls without results: {pending:?}"));
    }
    Ok(s)
}

pub fn assistant(content: Vec<Value>, ts: i64) -> Value {
    json!({"role":"assistant","content":content,"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":120,"output":60,"cacheRead":0,"cacheWrite":0,"totalTokens":180,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":ts})
}

fn push_block(m: &mut Value, block: Value) {
    if let Some(c) = m["content"].as_array_mut() {
        c.push(block);
    }
}

/// Appends a continuation line to the last text of a message.
fn append_text(m: &mut Value, line: &str) -> Option<()> {
    let line = unescape(line);
    if let Some(s) = m
        .get_mut("content")
        .and_then(|c| c.as_str().map(str::to_owned))
    {
        m["content"] = json!(format!("{s}\n{line}"));
        return Some(());
    }
    if let Some(out) = m.get("output").and_then(Value::as_str).map(str::to_owned) {
        m["output"] = json!(format!("{out}\n{line}"));
        return Some(());
    }
    let blocks = m.get_mut("content")?.as_array_mut()?;
    let b = blocks
        .iter_mut()
        .rev()
        .find(|b| b["type"] == "text" || b["type"] == "thinking")?;
    let key = if b["type"] == "text" {
        "text"
    } else {
        "thinking"
    };
    let t = b[key].as_str()?.to_string();
    b[key] = json!(format!("{t}\n{line}"));
    Some(())
}

/// Lowercase, backticks and emphasis removed, whitespace collapsed: what a probe matches.
pub fn normalize(s: &str) -> String {
    let cleaned: String = s.chars().filter(|c| !matches!(c, '`' | '*')).collect();
    cleaned
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

pub fn contains_any(hay: &str, alternatives: &str) -> bool {
    alternatives
        .split(" || ")
        .any(|a| hay.contains(&normalize(a)))
}

/// Writes a Pi-format session file holding the header and the first segment.
pub fn write_session(path: &Path, messages: &[Value]) -> Result<Option<String>, String> {
    let mut lines = vec![json!({"type":"session","version":3,"id":"019b0000-0000-7000-8000-00000000beef","timestamp":"2026-01-05T09:00:00.000Z","cwd":"/home/dev/project"}).to_string()];
    let parent = append_lines(&mut lines, messages, None, 0);
    std::fs::write(path, lines.join("\n") + "\n").map_err(|e| e.to_string())?;
    Ok(parent)
}

/// Message entries chained from `parent`; returns the new leaf id.
pub fn append_lines(
    lines: &mut Vec<String>,
    messages: &[Value],
    mut parent: Option<String>,
    base: usize,
) -> Option<String> {
    for (i, m) in messages.iter().enumerate() {
        let id = format!("{:08x}", base + i + 1);
        lines.push(json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-05T09:00:01.000Z","message":m}).to_string());
        parent = Some(id);
    }
    parent
}

pub fn load_corpus() -> Vec<Script> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("benches")
        .join("quality");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "session"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let name = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("?")
                .to_string();
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            parse_script(&name, &text).unwrap_or_else(|e| panic!("corpus script {e}"))
        })
        .collect()
}

/// Appends `segment` to the session file at `path`, chained under its last line, with ids from
/// `base` on (what a script's `compact` marker continues with).
pub fn append_segment(path: &Path, segment: &[Value], base: usize) -> Result<(), String> {
    let mut text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let leaf = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v["id"].as_str().map(str::to_owned));
    let mut lines = Vec::new();
    append_lines(&mut lines, segment, leaf, base);
    text.push_str(&(lines.join("\n") + "\n"));
    std::fs::write(path, text).map_err(|e| e.to_string())
}
