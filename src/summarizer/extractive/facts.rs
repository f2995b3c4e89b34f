//! Reading the messages: one chronological pass turns the transcript into actions (tool calls,
//! commands, model errors) with outcomes, and the queries the sections are filled from:
//! which failures are still open, what was done, what is pending, what comes next.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;

use super::layout::Caps;
use super::plan::{is_about, is_done_status, step_label, Plans};
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
    FileOp {
        tool: String,
        path: String,
    },
    /// Any other tool (MCP `server__tool`, custom tools): its name and key argument.
    Tool(String, Option<String>),
    AssistantError,
}

/// One thing the agent did (a tool call, a user bash command, a failed model turn).
pub(super) struct Action {
    pub(super) idx: usize,
    pub(super) kind: ActionKind,
    /// `None` while no result has been seen.
    pub(super) outcome: Option<Outcome>,
    /// Where the outcome was seen (the tool result); `idx` for actions that carry their own.
    pub(super) done_idx: usize,
    /// The first line of a generic tool's successful result.
    pub(super) result: Option<String>,
}

impl Action {
    pub(super) fn label(&self) -> String {
        match &self.kind {
            ActionKind::Command(c) => code(c, 160),
            ActionKind::FileOp { tool, path } => format!("`{tool}` {}", code(path, 200)),
            ActionKind::Tool(name, _) => format!("tool `{}`", clip_head(name, 60)),
            ActionKind::AssistantError => "the model call".to_string(),
        }
    }
}

/// Whether a failure still stands.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Resolution {
    Open,
    /// A later run of the same action succeeded, or a later message says it was fixed.
    Fixed,
    /// A later message gives the approach up.
    Abandoned,
    /// A later run of the same action no longer shows the error (it failed for another
    /// reason, which is its own failure).
    Superseded,
}

/// A failure, with whether something later fixed or abandoned it.
pub(super) struct FailedAction<'a> {
    pub(super) idx: usize,
    pub(super) label: String,
    pub(super) code: Option<i64>,
    pub(super) cancelled: bool,
    pub(super) text: &'a str,
    pub(super) resolved: bool,
    pub(super) resolution: Resolution,
}

impl FailedAction<'_> {
    /// ", later fixed" / ", abandoned" / "" for the Critical Context error lines.
    pub(super) fn resolution_note(&self) -> &'static str {
        match self.resolution {
            Resolution::Open => "",
            Resolution::Fixed => ", later fixed",
            Resolution::Abandoned => ", approach abandoned",
            Resolution::Superseded => ", gone in a later run",
        }
    }

    /// The line of the output that says what went wrong (see [`error_headline`]).
    pub(super) fn headline(&self) -> &str {
        error_headline(self.text)
    }

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
    /// Extension messages, each distinct text once: (index, customType, text, occurrences).
    pub(super) notes: Vec<(usize, String, String, usize)>,
    /// User texts that state a task (not acknowledgements, greetings or repeated boilerplate).
    pub(super) requests: Vec<(usize, String)>,
    /// Boilerplate the session repeats (or a bare slash command's injected text): (index,
    /// text, occurrences), stated once.
    pub(super) boilerplate: Vec<(usize, String, usize)>,
    /// The latest user text, when it is an acknowledgement ("yes please"): it answers the
    /// last question, so it is kept as context rather than as the goal.
    pub(super) last_ack: Option<(usize, String)>,
    /// The latest todo list a tool call wrote: (index, [(content, status)]).
    pub(super) todos: Option<(usize, Vec<(String, String)>)>,
    /// Every todo list a tool call wrote, in order (each one a full statement of the plan).
    pub(super) todo_lists: Vec<(usize, Vec<(String, String)>)>,
    /// Harness commands the user typed (`/model x`): (index, text). They are not requests.
    pub(super) slash_commands: Vec<(usize, String)>,
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
            requests: Vec::new(),
            boilerplate: Vec::new(),
            last_ack: None,
            todos: None,
            todo_lists: Vec::new(),
            slash_commands: Vec::new(),
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
                        done_idx: idx,
                        result: None,
                    });
                }
                Some("custom") => {
                    let text = content_text(m.get("content"), "");
                    if !text.trim().is_empty() {
                        let label = str_field(m, "customType").unwrap_or("custom").to_string();
                        let text = text.trim().to_string();
                        // Injected prompts are often re-sent verbatim: state each once.
                        match a.notes.iter_mut().find(|n| n.2 == text) {
                            Some(n) => n.3 += 1,
                            None => a.notes.push((idx, clip_head(&label, 60), text, 1)),
                        }
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
        a.classify_user_texts();
        a
    }

    /// Splits the user texts into requests, acknowledgements and boilerplate. Boilerplate is a
    /// text the session repeats verbatim, or one whose first line is a bare slash command
    /// (`/new`) followed by injected instructions.
    fn classify_user_texts(&mut self) {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, t) in &self.user_texts {
            *counts.entry(t.as_str()).or_default() += 1;
        }
        let mut boilerplate: Vec<(usize, String, usize)> = Vec::new();
        let mut requests = Vec::new();
        let mut slash_commands = Vec::new();
        for (idx, text) in &self.user_texts {
            if is_slash_command(text) {
                slash_commands.push((*idx, text.clone()));
                continue;
            }
            let repeated = counts.get(text.as_str()).copied().unwrap_or(0);
            let first = text.lines().next().unwrap_or("").trim();
            let slash = text.lines().count() > 1
                && first.starts_with('/')
                && first.len() > 1
                && !first.contains(char::is_whitespace);
            // A long text repeated is boilerplate; a short repeated one ("fix it") is not.
            if (repeated > 1 && text.chars().count() >= 40) || slash {
                if !boilerplate.iter().any(|b| b.1 == *text) {
                    boilerplate.push((*idx, text.clone(), repeated));
                }
            } else if !is_acknowledgement(text) {
                requests.push((*idx, text.clone()));
            }
        }
        self.last_ack = self
            .user_texts
            .iter()
            .rev()
            .find(|(_, t)| !is_slash_command(t))
            .filter(|(_, t)| is_acknowledgement(t))
            .cloned();
        self.slash_commands = slash_commands;
        self.requests = requests;
        self.boilerplate = boilerplate;
    }

    pub(super) fn read_assistant(
        &mut self,
        idx: usize,
        m: &Value,
        by_id: &mut BTreeMap<String, usize>,
    ) {
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
                if let Some(list) = todo_list(args) {
                    self.todos = Some((idx, list.clone()));
                    self.todo_lists.push((idx, list));
                }
                let kind = classify_call(&name, args);
                if let Some(id) = str_field(b, "id") {
                    by_id.insert(id.to_string(), self.actions.len());
                }
                self.actions.push(Action {
                    idx,
                    kind,
                    outcome: None,
                    done_idx: idx,
                    result: None,
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
                    done_idx: idx,
                    result: None,
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

    pub(super) fn read_tool_result(
        &mut self,
        idx: usize,
        m: &Value,
        by_id: &BTreeMap<String, usize>,
    ) {
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
            Some(action) => {
                action.outcome = Some(outcome);
                action.done_idx = idx;
                // What a generic tool returned (an id, a URL, a count) says what it did.
                if matches!(action.kind, ActionKind::Tool(..)) && !truthy(m.get("isError")) {
                    action.result = text
                        .lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .map(|l| clip_head(l, 80));
                }
            }
            None => {
                let name = str_field(m, "toolName").unwrap_or("unknown").to_string();
                self.actions.push(Action {
                    idx,
                    kind: ActionKind::Tool(name, None),
                    outcome: Some(outcome),
                    done_idx: idx,
                    result: None,
                });
            }
        }
    }

    /// 0..=1000 by position in the span, so newer facts win ties within a priority band.
    pub(super) fn recency(&self, idx: usize) -> u32 {
        let n = self.n.max(1) as u64;
        ((idx as u64).min(n) * 1000 / n) as u32
    }

    /// User sentences that state a rule or a preference: questions ask and set no rule, and a
    /// task described with a weak marker ("Add a flag that … without …") is a request.
    pub(super) fn constraints(&self) -> Vec<(usize, String)> {
        self.user_sentences(&CONSTRAINT_RE)
            .into_iter()
            .filter(|(_, s)| is_constraint(s))
            .collect()
    }

    /// User sentences matching `re`, questions left out (a question asks; it sets no rule).
    /// Slash commands are not sentences of the user's.
    pub(super) fn user_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
        let texts: Vec<(usize, String)> = self
            .user_texts
            .iter()
            .filter(|(_, t)| !is_slash_command(t))
            .cloned()
            .collect();
        pick_sentences(&texts, re)
            .into_iter()
            .filter(|(_, s)| !is_question(s))
            .collect()
    }

    /// Failures in chronological order, each with its resolution: fixed when a later run of
    /// the same action succeeded (the same command, or one extending it; the same tool on the
    /// same path or key; a later normal model turn) or a later sentence naming the failure says
    /// it is fixed; abandoned when a later sentence naming it gives it up; superseded when a
    /// later run of exactly the same action failed without showing this error any more.
    pub(super) fn failures(&self) -> Vec<FailedAction<'_>> {
        let mut out = Vec::new();
        for (i, act) in self.actions.iter().enumerate() {
            let (code, cancelled, text) = match &act.outcome {
                Some(Outcome::Fail { code, text }) => (*code, false, text.as_str()),
                Some(Outcome::Cancelled) => (None, true, "command cancelled"),
                _ => continue,
            };
            let later = &self.actions[i + 1..];
            let rerun_ok = match act.kind {
                ActionKind::AssistantError => self.last_ok_assistant.is_some_and(|j| j > act.idx),
                _ => later.iter().any(|l| {
                    same_action(&l.kind, &act.kind) && matches!(l.outcome, Some(Outcome::Ok { .. }))
                }),
            };
            let headline = error_headline(text);
            let superseded = !cancelled
                && !matches!(act.kind, ActionKind::AssistantError)
                && later.iter().any(|l| {
                    matches!(&l.outcome, Some(Outcome::Fail { text: t, .. }) if !still_shows(t, headline))
                        && exactly_same_action(&l.kind, &act.kind)
                });
            let resolution = if rerun_ok {
                Resolution::Fixed
            } else {
                let mut words = failure_words(&act.kind, text);
                words.extend(identifiers(headline));
                match self.said_about(&words, Some(act.done_idx)) {
                    Resolution::Open if superseded => Resolution::Superseded,
                    r => r,
                }
            };
            out.push(FailedAction {
                idx: act.idx,
                label: act.label(),
                code,
                cancelled,
                text,
                resolved: resolution != Resolution::Open,
                resolution,
            });
        }
        out
    }

    /// What assistant prose after `after` (all of it for `None`) says about a failure named by
    /// `words` (distinctive words of its command or tool, error codes and identifiers from its
    /// output): a sentence naming it that gives it up, or that reports it fixed (not negated:
    /// "still fails" closes nothing).
    fn said_about(&self, words: &[String], after: Option<usize>) -> Resolution {
        if words.is_empty() {
            return Resolution::Open;
        }
        let mut verdict = Resolution::Open;
        for (idx, said) in &self.assistant_texts {
            if after.is_some_and(|a| *idx <= a) {
                continue;
            }
            for sentence in sentences(said) {
                let lower = sentence.to_lowercase();
                if !words.iter().any(|w| mentions(&lower, w)) {
                    continue;
                }
                if ABANDON_RE.is_match(&sentence) {
                    verdict = Resolution::Abandoned;
                } else if FIXED_RE.is_match(&sentence) && !NEGATION_RE.is_match(&sentence) {
                    verdict = Resolution::Fixed;
                }
            }
        }
        verdict
    }

    /// How this span settles an item carried over from an earlier summary (a blocker, a next
    /// step, an error line) whose first inline-code span names a command: a successful run of
    /// it fixes it; a failed run of exactly it that no longer shows the item's error supersedes
    /// it; a sentence naming it that reports it fixed or gives it up settles it too.
    pub(super) fn resolves(&self, item: &str) -> Resolution {
        let Some(cmd) = item.split('`').nth(1).filter(|c| !c.trim().is_empty()) else {
            return Resolution::Open;
        };
        let cmd = cmd.trim();
        let ran_ok = self.actions.iter().any(|a| match (&a.kind, &a.outcome) {
            (ActionKind::Command(c), Some(Outcome::Ok { .. })) => same_command(cmd, c.trim()),
            _ => false,
        });
        if ran_ok {
            return Resolution::Fixed;
        }
        let error = carried_error(item);
        let headline = error.map(error_headline).unwrap_or("");
        let mut words = failure_words(&ActionKind::Command(cmd.to_string()), headline);
        words.extend(identifiers(headline));
        let said = self.said_about(&words, None);
        if said != Resolution::Open {
            return said;
        }
        let last_failure = self
            .actions
            .iter()
            .rev()
            .find_map(|a| match (&a.kind, &a.outcome) {
                (ActionKind::Command(c), Some(Outcome::Fail { text, .. })) if c.trim() == cmd => {
                    Some(text.as_str())
                }
                _ => None,
            });
        match last_failure {
            Some(text) if !headline.is_empty() && !still_shows(text, headline) => {
                Resolution::Superseded
            }
            _ => Resolution::Open,
        }
    }

    /// Whether a "Command `x` → …" line of an earlier summary is superseded: this span ran
    /// exactly that command again, so its own line has the latest outcomes.
    pub(super) fn reruns(&self, item: &str) -> bool {
        let Some(cmd) = item
            .strip_prefix("Command `")
            .and_then(|r| r.split('`').next())
        else {
            return false;
        };
        self.actions.iter().any(
            |a| matches!(&a.kind, ActionKind::Command(c) if code(c, 160) == format!("`{cmd}`")),
        )
    }

    /// Key Decisions: sentences announcing a choice or giving an approach up. A short
    /// abandonment ("Abandoning pgloader.") keeps the sentence before it, which gives the reason.
    pub(super) fn decisions(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (idx, text) in &self.assistant_texts {
            let all = sentences(text);
            for (k, s) in all.iter().enumerate() {
                let abandon = ABANDON_RE.is_match(s);
                if !abandon && !DECISION_RE.is_match(s) {
                    continue;
                }
                let with_reason = match (abandon, k.checked_sub(1).and_then(|p| all.get(p))) {
                    (true, Some(prev)) if s.chars().count() < 60 && !DECISION_RE.is_match(prev) => {
                        format!("{prev} {s}")
                    }
                    _ => s.clone(),
                };
                out.push((*idx, with_reason));
            }
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
        let mut tools: Vec<DoneItem> = Vec::new();
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
                ActionKind::Command(c) if ok && is_exploration(c) => {}
                ActionKind::Command(c) if ok => {
                    let before = failed_commands.contains(c.as_str());
                    commands.insert(c.as_str(), (act.idx, before));
                }
                ActionKind::Tool(name, key) if ok => {
                    let what = match (key, &act.result) {
                        (Some(k), Some(r)) => format!(" ({}) → {r}", clip_head(k, 80)),
                        (Some(k), None) => format!(" ({})", clip_head(k, 80)),
                        (None, Some(r)) => format!(" → {r}"),
                        (None, None) => String::new(),
                    };
                    tools.push(DoneItem {
                        idx: act.idx,
                        text: format!("Called `{}`{what}", clip_head(name, 60)),
                    });
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
        // The latest few calls per tool: a long run of the same call says little more.
        let mut per_tool: BTreeMap<String, usize> = BTreeMap::new();
        for item in tools.into_iter().rev() {
            let name = item.text.split('`').nth(1).unwrap_or("").to_string();
            let n = per_tool.entry(name).or_default();
            *n += 1;
            if *n <= 4 {
                out.push(item);
            }
        }
        out.sort_by_key(|d| d.idx);
        out
    }

    /// Work the assistant reported done in its own words ("I've rewritten the config", "the
    /// OperationalError is fixed"): each reporting clause of the latest few, questions left
    /// out. A sentence that turns to what comes next ("…, and I will now …") gives only its
    /// first clause.
    pub(super) fn reported_work(&self, cap: usize) -> Vec<DoneItem> {
        let mut out = Vec::new();
        for (idx, text) in &self.assistant_texts {
            for sentence in sentences(text) {
                for clause in clauses(&sentence) {
                    if clause.split_whitespace().count() >= 3 && reports_done(&clause) {
                        out.push(DoneItem {
                            idx: *idx,
                            text: clip_head(&clause, cap),
                        });
                    }
                }
            }
        }
        let skip = out.len().saturating_sub(6);
        out.split_off(skip)
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
        // A todo tool's step in progress; its pending steps are Next Steps (see `plan`).
        if let Some((idx, list)) = &self.todos {
            for (content, status) in list
                .iter()
                .filter(|(_, st)| !is_done_status(st) && st.replace('_', " ") == "in progress")
            {
                let status = status.replace('_', " ");
                out.push((*idx, format!("{} ({status})", clip_head(content, 200))));
            }
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

    /// Ranked next steps: fix what is broken, finish what is pending, the plan's steps left
    /// (in order), what the assistant said it would do, then the latest request. Nothing that
    /// was reported done is a next step: a clause announcing a fix or finished work, or naming
    /// a finished plan step, is left out.
    pub(super) fn next_steps(
        &self,
        caps: &Caps,
        plans: &Plans,
        latest_request: Option<&str>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for fail in self.failures().iter().rev().filter(|f| !f.resolved).take(2) {
            out.push(format!(
                "Fix the failure of {}: {}",
                fail.label,
                first_line(fail.headline(), caps.item)
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
        for step in plans.left.iter().filter(|s| !s.in_progress) {
            out.push(format!(
                "{}{}",
                step_label(step.number),
                clip_head(&step.text, caps.item)
            ));
        }
        let settled: Vec<Vec<String>> = plans
            .done
            .iter()
            .map(|(_, t)| t)
            .chain(plans.left.iter().map(|s| &s.text))
            .map(|t| stems(t))
            .collect();
        let said: Vec<String> = self
            .said_next()
            .into_iter()
            .filter(|c| {
                let cs = stems(c);
                !settled
                    .iter()
                    .any(|st| is_about(&cs, st) && is_about(st, &cs))
            })
            .collect();
        for s in said.iter().rev().take(3).rev() {
            out.push(clip_head(s, caps.item));
        }
        if let Some(text) = latest_request {
            out.push(format!(
                "Make sure the latest user request is fully handled: {}",
                first_line(text, caps.item)
            ));
        }
        out
    }

    /// What the last assistant message says comes next: its clauses announcing an action
    /// ("next I will …"), not those reporting work done, asking, or announcing a choice (a
    /// choice is a Key Decision).
    pub(super) fn said_next(&self) -> Vec<String> {
        let Some((_, text)) = self.assistant_texts.last() else {
            return Vec::new();
        };
        sentences(text)
            .iter()
            .flat_map(|s| clauses(s))
            .filter(|c| {
                NEXT_RE.is_match(c)
                    // "Remaining:" leads into a list (a plan statement), it says nothing itself.
                    && !c.trim_end().ends_with(':')
                    && !reports_done(c)
                    && !is_question(c)
                    && !DECISION_RE.is_match(c)
            })
            .collect()
    }

    /// One line per distinct command (latest 12): its outcomes in order, most recent last.
    pub(super) fn command_histories(&self) -> Vec<CommandHistory> {
        let mut by_cmd: BTreeMap<&str, (Vec<String>, usize)> = BTreeMap::new();
        for act in &self.actions {
            let ActionKind::Command(c) = &act.kind else {
                continue;
            };
            if is_exploration(c) && matches!(act.outcome, Some(Outcome::Ok { .. })) {
                continue;
            }
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

/// How a tool call reads: Pi's file tools by name; shell-like tools by their arguments
/// (`command`, `cmd` or `script`, whatever the tool is called: `bash`, `exec`, `shell`,
/// `run_terminal_cmd`, `execute_command`); other file tools by a path argument and a verb in
/// the name (`read_file`, `write_to_file`, `replace_in_file`); everything else generically.
pub(super) fn classify_call(name: &str, args: Option<&Value>) -> ActionKind {
    let arg = |k: &str| {
        args.and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .filter(|v| !v.trim().is_empty())
    };
    let path = [
        "path",
        "file_path",
        "filePath",
        "file",
        "target_file",
        "filename",
    ]
    .iter()
    .find_map(|k| arg(k));
    if let (Some(p), "read" | "write" | "edit") = (path, name) {
        return ActionKind::FileOp {
            tool: name.to_string(),
            path: p.to_string(),
        };
    }
    let lower = name.to_ascii_lowercase();
    if let Some(p) = path {
        let verb = if lower.contains("str_replace") {
            match arg("command") {
                Some("view") => Some("read"),
                Some("create") => Some("write"),
                _ => Some("edit"),
            }
        } else if ["edit", "replace", "patch", "insert"]
            .iter()
            .any(|v| lower.contains(v))
        {
            Some("edit")
        } else if ["write", "create", "save"]
            .iter()
            .any(|v| lower.contains(v))
        {
            Some("write")
        } else if ["read", "view", "open", "cat"]
            .iter()
            .any(|v| lower.contains(v))
        {
            Some("read")
        } else {
            None
        };
        if let Some(tool) = verb {
            return ActionKind::FileOp {
                tool: tool.to_string(),
                path: p.to_string(),
            };
        }
    }
    let command = ["command", "cmd", "script"].iter().find_map(|k| {
        match args.and_then(|a| a.get(*k)) {
            Some(Value::String(c)) if !c.trim().is_empty() => Some(c.clone()),
            // `["bash", "-lc", "cargo test"]`
            Some(Value::Array(parts)) if !parts.is_empty() => {
                let words: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
                (words.len() == parts.len()).then(|| words.join(" "))
            }
            _ => None,
        }
    });
    if let Some(c) = command {
        return ActionKind::Command(c);
    }
    ActionKind::Tool(name.to_string(), key_argument(args))
}

/// The argument that says what a generic tool call was about: a well-known key if present,
/// else the first short string or number.
fn key_argument(args: Option<&Value>) -> Option<String> {
    let obj = args?.as_object()?;
    const KEYS: [&str; 12] = [
        "title",
        "query",
        "name",
        "url",
        "repo",
        "issue_number",
        "id",
        "pattern",
        "q",
        "topic",
        "owner",
        "team",
    ];
    let show = |k: &str, v: &Value| match v {
        Value::String(s) if !s.trim().is_empty() => Some(format!("{k}: {}", first_line(s, 80))),
        Value::Number(n) => Some(format!("{k}: {n}")),
        _ => None,
    };
    KEYS.iter()
        .find_map(|k| obj.get(*k).and_then(|v| show(k, v)))
        .or_else(|| obj.iter().find_map(|(k, v)| show(k, v)))
}

/// A todo list written by a tool (`todos: [{content, status}]`, as several harnesses do).
fn todo_list(args: Option<&Value>) -> Option<Vec<(String, String)>> {
    let items = args?.get("todos")?.as_array()?;
    let list: Vec<(String, String)> = items
        .iter()
        .filter_map(|t| {
            let content = ["content", "text", "title", "task"]
                .iter()
                .find_map(|k| t.get(*k).and_then(Value::as_str))?;
            let status = t.get("status").and_then(Value::as_str).unwrap_or("pending");
            Some((content.trim().to_string(), status.trim().to_string()))
        })
        .filter(|(c, _)| !c.is_empty())
        .collect();
    (!list.is_empty()).then_some(list)
}

/// Whether two actions are the same thing tried again.
fn same_action(later: &ActionKind, failed: &ActionKind) -> bool {
    match (later, failed) {
        (ActionKind::Command(a), ActionKind::Command(b)) => same_command(a.trim(), b.trim()),
        (ActionKind::Tool(a, ka), ActionKind::Tool(b, kb)) => a == b && ka == kb,
        (a, b) => a == b,
    }
}

/// Exactly the same action again (a re-run that can supersede an error: a command extended
/// with more arguments may not run the part that failed).
fn exactly_same_action(later: &ActionKind, failed: &ActionKind) -> bool {
    match (later, failed) {
        (ActionKind::Command(a), ActionKind::Command(b)) => a.trim() == b.trim(),
        (a, b) => a == b,
    }
}

/// The error text of a carried-over item: what follows the first `: ` after its first
/// inline-code span (`` `cmd` failed (exit code 1): error… ``, `` Fix the failure of `cmd`: … ``).
fn carried_error(item: &str) -> Option<&str> {
    let after_code = item.splitn(3, '`').nth(2)?;
    let (_, rest) = after_code
        .split_once(": ")
        .or_else(|| after_code.split_once(":\n"))?;
    let rest = rest.trim().trim_end_matches('…').trim();
    (!rest.is_empty()).then_some(rest)
}

/// The same command, or one extends the other word for word (`docker build . && docker run
/// img` is settled by `docker build . && docker run img --version`).
fn same_command(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long == short
        || long
            .strip_prefix(short)
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
}

/// Distinctive words naming a failure: error codes from its output, and the words of its
/// command or tool that are not generic runners (`npm`, `cargo`, `run`, flags).
fn failure_words(kind: &ActionKind, text: &str) -> Vec<String> {
    const GENERIC: [&str; 34] = [
        "npm", "npx", "pnpm", "yarn", "bun", "run", "exec", "cargo", "python", "python3", "go",
        "make", "sudo", "bash", "sh", "cd", "git", "docker", "test", "tests", "build", "node",
        "env", "time", "uv", "poetry", "pip", "with", "then", "true", "false", "echo", "cat",
        "grep",
    ];
    let mut words: Vec<String> = ERROR_CODE_RE
        .find_iter(text)
        .map(|m| m.as_str().to_lowercase())
        .collect();
    let source = match kind {
        ActionKind::Command(c) => c.as_str(),
        ActionKind::Tool(name, _) => name.as_str(),
        ActionKind::FileOp { path, .. } => path.as_str(),
        ActionKind::AssistantError => "",
    };
    for w in source
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | ';' | '&' | '(' | ')' | '\'' | '"'))
    {
        let w = w.trim_matches(|c: char| matches!(c, ',' | ':' | '`'));
        let lower = w.to_lowercase();
        if w.chars().count() >= 4
            && !w.starts_with('-')
            && !w.contains("://")
            && !w.contains('=')
            && !GENERIC.contains(&lower.as_str())
        {
            words.push(lower);
        }
    }
    words.sort();
    words.dedup();
    words
}

/// `word` occurs in `lower` (already lowercased) not as part of a longer word.
fn mentions(lower: &str, word: &str) -> bool {
    let mut from = 0;
    while let Some(pos) = lower.get(from..).and_then(|s| s.find(word)) {
        let start = from + pos;
        let end = start + word.len();
        let before = lower[..start].chars().last();
        let after = lower[end..].chars().next();
        let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
        if edge(before) && edge(after) {
            return true;
        }
        from = start + 1;
        while !lower.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}
