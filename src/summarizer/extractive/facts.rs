//! Reading the messages: one chronological pass turns the transcript into actions (tool calls,
//! commands, model errors) with outcomes, and the queries the sections are filled from:
//! which failures are still open, what was done, what is pending, what comes next.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;

use super::layout::Caps;
use super::text::*;


/// How a tool call or command ended.
#[derive(Clone)]
pub(super) enum Outcome {
    Ok { exit: Option<i64> },
    Fail { code: Option<i64>, text: String },
    Cancelled,
}

#[derive(Clone, PartialEq, Eq)]
pub(super) enum ActionKind {
    Command(String),
    FileOp { tool: String, path: String },
    Tool(String),
    AssistantError,
}

/// One thing the agent did (a tool call, a user bash command, a failed model turn).
pub(super) struct Action {
    pub(super) idx: usize,
    pub(super) kind: ActionKind,
    /// `None` while no result has been seen.
    pub(super) outcome: Option<Outcome>,
}

impl Action {
    pub(super) fn label(&self) -> String {
        match &self.kind {
            ActionKind::Command(c) => code(c, 160),
            ActionKind::FileOp { tool, path } => format!("`{tool}` {}", code(path, 200)),
            ActionKind::Tool(name) => format!("tool `{}`", clip_head(name, 60)),
            ActionKind::AssistantError => "the model call".to_string(),
        }
    }
}

/// A failure, with whether a later success of the same action fixed it.
pub(super) struct Failure<'a> {
    pub(super) idx: usize,
    pub(super) label: String,
    pub(super) code: Option<i64>,
    pub(super) cancelled: bool,
    pub(super) text: &'a str,
    pub(super) resolved: bool,
}

impl Failure<'_> {
    pub(super) fn code_note(&self) -> String {
        match (self.cancelled, self.code) {
            (true, _) => " (cancelled)".to_string(),
            (false, Some(c)) => format!(" (exit code {c})"),
            (false, None) => String::new(),
        }
    }
}

pub(super) struct DoneItem {
    pub(super) idx: usize,
    pub(super) text: String,
}

pub(super) struct CommandHistory {
    pub(super) label: String,
    pub(super) outcomes: String,
    pub(super) last_idx: usize,
}

/// Everything the sections are filled from, gathered in one chronological pass.
pub(super) struct Analysis {
    pub(super) n: usize,
    pub(super) user_texts: Vec<(usize, String)>,
    /// Assistant `text` blocks joined with "\n" (thinking is not a conclusion).
    pub(super) assistant_texts: Vec<(usize, String)>,
    pub(super) actions: Vec<Action>,
    /// Index of the last assistant message that ended normally.
    pub(super) last_ok_assistant: Option<usize>,
    /// The last assistant message, if it was aborted: (index, errorMessage).
    pub(super) aborted_last: Option<(usize, String)>,
    /// Extension messages: (index, customType, text).
    pub(super) notes: Vec<(usize, String, String)>,
    /// branchSummary / compactionSummary messages inside the span: (index, label, summary).
    pub(super) embedded_summaries: Vec<(usize, &'static str, String)>,
}

pub(super) fn str_field<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a `content` field: a string, or its `text` blocks joined with `sep`.
pub(super) fn content_text(content: Option<&Value>, sep: &str) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| str_field(b, "type") == Some("text"))
            .filter_map(|b| str_field(b, "text"))
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

pub(super) fn truthy(v: Option<&Value>) -> bool {
    crate::json::truthy(v)
}

impl Analysis {
    pub(super) fn of(messages: &[Value]) -> Self {
        let mut a = Analysis {
            n: messages.len(),
            user_texts: Vec::new(),
            assistant_texts: Vec::new(),
            actions: Vec::new(),
            last_ok_assistant: None,
            aborted_last: None,
            notes: Vec::new(),
            embedded_summaries: Vec::new(),
        };
        // toolCallId → index into `actions`; ids may repeat, the latest call wins.
        let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
        for (idx, m) in messages.iter().enumerate() {
            match str_field(m, "role") {
                Some("user") => {
                    let text = content_text(m.get("content"), "");
                    if !text.trim().is_empty() {
                        a.user_texts.push((idx, text.trim().to_string()));
                    }
                }
                Some("assistant") => a.read_assistant(idx, m, &mut by_id),
                Some("toolResult") => a.read_tool_result(idx, m, &by_id),
                Some("bashExecution") => {
                    if truthy(m.get("excludeFromContext")) {
                        continue;
                    }
                    let command = str_field(m, "command").unwrap_or("").to_string();
                    let output = str_field(m, "output").unwrap_or("");
                    let exit = m.get("exitCode").and_then(Value::as_f64);
                    let outcome = if truthy(m.get("cancelled")) {
                        Outcome::Cancelled
                    } else {
                        match exit {
                            Some(c) if c != 0.0 => Outcome::Fail {
                                code: Some(c as i64),
                                text: clip_tail(output, 4000),
                            },
                            _ => Outcome::Ok {
                                exit: exit.map(|c| c as i64),
                            },
                        }
                    };
                    a.actions.push(Action {
                        idx,
                        kind: ActionKind::Command(command),
                        outcome: Some(outcome),
                    });
                }
                Some("custom") => {
                    let text = content_text(m.get("content"), "");
                    if !text.trim().is_empty() {
                        let label = str_field(m, "customType").unwrap_or("custom").to_string();
                        a.notes.push((idx, clip_head(&label, 60), text));
                    }
                }
                Some("branchSummary") | Some("compactionSummary") => {
                    let label = if str_field(m, "role") == Some("branchSummary") {
                        "Summary of an abandoned branch"
                    } else {
                        "Earlier summary"
                    };
                    if let Some(s) = str_field(m, "summary") {
                        if !s.trim().is_empty() {
                            a.embedded_summaries.push((idx, label, s.to_string()));
                        }
                    }
                }
                _ => {}
            }
        }
        a
    }

    pub(super) fn read_assistant(&mut self, idx: usize, m: &Value, by_id: &mut BTreeMap<String, usize>) {
        let text = content_text(m.get("content"), "\n");
        if !text.trim().is_empty() {
            self.assistant_texts.push((idx, text.trim().to_string()));
        }
        if let Some(Value::Array(blocks)) = m.get("content") {
            for b in blocks
                .iter()
                .filter(|b| str_field(b, "type") == Some("toolCall"))
            {
                let name = str_field(b, "name").unwrap_or("unknown").to_string();
                let args = b.get("arguments");
                let arg = |k: &str| args.and_then(|a| a.get(k)).and_then(Value::as_str);
                let kind = match (name.as_str(), arg("path"), arg("command")) {
                    ("read" | "write" | "edit", Some(p), _) if !p.is_empty() => {
                        ActionKind::FileOp {
                            tool: name.clone(),
                            path: p.to_string(),
                        }
                    }
                    ("bash", _, Some(c)) if !c.trim().is_empty() => {
                        ActionKind::Command(c.to_string())
                    }
                    _ => ActionKind::Tool(name.clone()),
                };
                if let Some(id) = str_field(b, "id") {
                    by_id.insert(id.to_string(), self.actions.len());
                }
                self.actions.push(Action {
                    idx,
                    kind,
                    outcome: None,
                });
            }
        }
        match str_field(m, "stopReason") {
            Some("error") => {
                let msg = str_field(m, "errorMessage").unwrap_or("unknown error");
                self.actions.push(Action {
                    idx,
                    kind: ActionKind::AssistantError,
                    outcome: Some(Outcome::Fail {
                        code: None,
                        text: msg.to_string(),
                    }),
                });
                self.aborted_last = None;
            }
            Some("aborted") => {
                let msg = str_field(m, "errorMessage").unwrap_or("").to_string();
                self.aborted_last = Some((idx, msg));
            }
            _ => {
                self.last_ok_assistant = Some(idx);
                self.aborted_last = None;
            }
        }
    }

    pub(super) fn read_tool_result(&mut self, idx: usize, m: &Value, by_id: &BTreeMap<String, usize>) {
        let text = content_text(m.get("content"), "");
        let outcome = if truthy(m.get("isError")) {
            let code = EXIT_CODE_RE
                .captures(&text)
                .and_then(|c| c.get(1))
                .and_then(|c| c.as_str().parse::<i64>().ok());
            Outcome::Fail {
                code,
                text: clip_head(&text, 4000),
            }
        } else {
            Outcome::Ok { exit: None }
        };
        let slot = str_field(m, "toolCallId")
            .and_then(|id| by_id.get(id))
            .copied()
            .filter(|&i| self.actions.get(i).is_some_and(|a| a.outcome.is_none()));
        match slot.and_then(|i| self.actions.get_mut(i)) {
            Some(action) => action.outcome = Some(outcome),
            None => {
                let name = str_field(m, "toolName").unwrap_or("unknown").to_string();
                self.actions.push(Action {
                    idx,
                    kind: ActionKind::Tool(name),
                    outcome: Some(outcome),
                });
            }
        }
    }

    /// 0..=1000 by position in the span, so newer facts win ties within a priority band.
    pub(super) fn recency(&self, idx: usize) -> u32 {
        let n = self.n.max(1) as u64;
        ((idx as u64).min(n) * 1000 / n) as u32
    }

    pub(super) fn user_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
        pick_sentences(&self.user_texts, re)
    }

    pub(super) fn assistant_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
        pick_sentences(&self.assistant_texts, re)
    }

    /// Failures in chronological order, each marked resolved when the same action later
    /// succeeded (same command, same tool on the same path, or a later normal model turn).
    pub(super) fn failures(&self) -> Vec<Failure<'_>> {
        let mut out = Vec::new();
        for (i, act) in self.actions.iter().enumerate() {
            let (code, cancelled, text) = match &act.outcome {
                Some(Outcome::Fail { code, text }) => (*code, false, text.as_str()),
                Some(Outcome::Cancelled) => (None, true, "command cancelled"),
                _ => continue,
            };
            let resolved = match act.kind {
                ActionKind::AssistantError => self.last_ok_assistant.is_some_and(|j| j > act.idx),
                _ => self.actions[i + 1..].iter().any(|later| {
                    later.kind == act.kind && matches!(later.outcome, Some(Outcome::Ok { .. }))
                }),
            };
            out.push(Failure {
                idx: act.idx,
                label: act.label(),
                code,
                cancelled,
                text,
                resolved,
            });
        }
        out
    }

    /// Successful file changes (one line per path) and commands (one line per command).
    pub(super) fn done_items(&self) -> Vec<DoneItem> {
        // path → (writes, edits, last index)
        let mut files: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
        // command → (last ok index, failed before)
        let mut commands: BTreeMap<&str, (usize, bool)> = BTreeMap::new();
        let mut failed_commands: BTreeSet<&str> = BTreeSet::new();
        for act in &self.actions {
            let ok = matches!(act.outcome, Some(Outcome::Ok { .. }));
            match &act.kind {
                ActionKind::FileOp { tool, path } if ok && tool != "read" => {
                    let e = files.entry(path.as_str()).or_insert((0, 0, act.idx));
                    if tool == "write" {
                        e.0 += 1;
                    } else {
                        e.1 += 1;
                    }
                    e.2 = act.idx;
                }
                ActionKind::Command(c) if ok => {
                    let before = failed_commands.contains(c.as_str());
                    commands.insert(c.as_str(), (act.idx, before));
                }
                ActionKind::Command(c) if act.outcome.is_some() => {
                    // A command that failed after its last success is not done.
                    failed_commands.insert(c.as_str());
                    commands.remove(c.as_str());
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for (path, (writes, edits, idx)) in files {
            let p = code(path, 200);
            let text = match (writes, edits) {
                (0, 1) => format!("Edited {p}"),
                (0, e) => format!("Edited {p} ({e} edits)"),
                (_, 0) => format!("Wrote {p}"),
                (_, _) => format!("Wrote and edited {p}"),
            };
            out.push(DoneItem { idx, text });
        }
        for (cmd, (idx, failed_before)) in commands {
            let note = if failed_before {
                " (after earlier failures)"
            } else {
                ""
            };
            out.push(DoneItem {
                idx,
                text: format!("Ran {} successfully{note}", code(cmd, 160)),
            });
        }
        out.sort_by_key(|d| d.idx);
        out
    }

    /// (index, text) lines for In Progress: the last assistant words, pending calls, an
    /// aborted final turn.
    pub(super) fn in_progress(&self, caps: &Caps) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        if let Some((idx, text)) = self.assistant_texts.last() {
            out.push((
                *idx,
                format!("Last assistant message: {}", clip_tail(text, caps.error)),
            ));
        }
        let pending: Vec<&Action> = self
            .actions
            .iter()
            .filter(|a| a.outcome.is_none())
            .collect();
        for act in pending.iter().rev().take(3).rev() {
            out.push((act.idx, format!("Pending {} (no result yet)", act.label())));
        }
        if let Some((idx, msg)) = &self.aborted_last {
            let why = if msg.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", first_line(msg, caps.item))
            };
            out.push((*idx, format!("The last assistant turn was aborted{why}")));
        }
        out
    }

    /// Ranked next steps: fix what is broken, finish what is pending, what the assistant said
    /// it would do, then the latest request.
    pub(super) fn next_steps(&self, caps: &Caps) -> Vec<String> {
        let mut out = Vec::new();
        for fail in self.failures().iter().rev().filter(|f| !f.resolved).take(2) {
            out.push(format!(
                "Fix the failure of {}: {}",
                fail.label,
                first_line(fail.text, caps.item)
            ));
        }
        let pending: Vec<&Action> = self
            .actions
            .iter()
            .filter(|a| a.outcome.is_none())
            .collect();
        for act in pending.iter().rev().take(2) {
            out.push(format!("Check the result of the pending {}", act.label()));
        }
        if let Some((_, text)) = self.assistant_texts.last() {
            let said: Vec<String> = sentences(text)
                .into_iter()
                .filter(|s| NEXT_RE.is_match(s))
                .collect();
            for s in said.iter().rev().take(3).rev() {
                out.push(clip_head(s, caps.item));
            }
        }
        if let Some((_, text)) = self.user_texts.last() {
            out.push(format!(
                "Make sure the latest user request is fully handled: {}",
                first_line(text, caps.item)
            ));
        }
        out
    }

    /// One line per distinct command (latest 12): its outcomes in order, most recent last.
    pub(super) fn command_histories(&self) -> Vec<CommandHistory> {
        let mut by_cmd: BTreeMap<&str, (Vec<String>, usize)> = BTreeMap::new();
        for act in &self.actions {
            let ActionKind::Command(c) = &act.kind else {
                continue;
            };
            let outcome = match &act.outcome {
                Some(Outcome::Ok { exit: Some(c) }) => format!("exit {c}"),
                Some(Outcome::Ok { exit: None }) => "ok".to_string(),
                Some(Outcome::Fail { code: Some(c), .. }) => format!("exit {c}"),
                Some(Outcome::Fail { code: None, .. }) => "error".to_string(),
                Some(Outcome::Cancelled) => "cancelled".to_string(),
                None => "pending".to_string(),
            };
            let e = by_cmd.entry(c.as_str()).or_insert((Vec::new(), act.idx));
            e.0.push(outcome);
            e.1 = act.idx;
        }
        let mut out: Vec<CommandHistory> = by_cmd
            .into_iter()
            .map(|(cmd, (outcomes, last_idx))| {
                // Runs of the same outcome collapse ("ok ×3"); the latest four runs are shown.
                let mut runs: Vec<(String, usize)> = Vec::new();
                for o in outcomes {
                    match runs.last_mut() {
                        Some((last, n)) if *last == o => *n += 1,
                        _ => runs.push((o, 1)),
                    }
                }
                let shown = runs.len().min(4);
                let mut parts: Vec<String> = runs[runs.len() - shown..]
                    .iter()
                    .map(|(o, n)| {
                        if *n > 1 {
                            format!("{o} ×{n}")
                        } else {
                            o.clone()
                        }
                    })
                    .collect();
                if runs.len() > shown {
                    parts.insert(0, "…".to_string());
                }
                let list = parts.join(", ");
                CommandHistory {
                    label: code(cmd, 160),
                    outcomes: list,
                    last_idx,
                }
            })
            .collect();
        out.sort_by_key(|c| c.last_idx);
        let skip = out.len().saturating_sub(12);
        out.split_off(skip)
    }

    /// Pi's file lists from the span's own tool calls (compaction.md §6.5): (read, modified).
    pub(super) fn file_lists(&self) -> (Vec<String>, Vec<String>) {
        let mut read = BTreeSet::new();
        let mut modified = BTreeSet::new();
        for act in &self.actions {
            if let ActionKind::FileOp { tool, path } = &act.kind {
                if tool == "read" {
                    read.insert(path.clone());
                } else {
                    modified.insert(path.clone());
                }
            }
        }
        let mut read: Vec<String> = read.difference(&modified).cloned().collect();
        let mut modified: Vec<String> = modified.into_iter().collect();
        read.sort_by(|a, b| crate::json::cmp_utf16(a, b));
        modified.sort_by(|a, b| crate::json::cmp_utf16(a, b));
        (read, modified)
    }
}

pub(super) fn pick_sentences(texts: &[(usize, String)], re: &Regex) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (idx, text) in texts {
        for s in sentences(text) {
            if re.is_match(&s) {
                out.push((*idx, s));
            }
        }
    }
    out
}
