//! The one chronological pass over the messages: user texts classified, tool calls and
//! commands read into actions, their results matched to them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::noise::{
    deblob, injected_tag, is_error_report, is_no_match, is_trivial_message, quoted_key, sent_shape,
    shape, split_injected, split_preamble, without_markup, without_reference,
};
use super::super::text::*;
use super::*;

impl Analysis {
    pub(in super::super) fn of(messages: super::super::Messages<'_>) -> Self {
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
            entry_ids: BTreeMap::new(),
        };
        // toolCallId → index into `actions`; ids may repeat, the latest call wins.
        let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
        // A note's shape (see `noise::shape`) → its index in `notes`.
        let mut note_shapes: BTreeMap<String, usize> = BTreeMap::new();
        for (idx, m) in messages.each().enumerate() {
            let m = &*m;
            match str_field(m, "role") {
                Some("user") => {
                    let text = string_text(m.get("content"), "");
                    let text = text.trim();
                    if text.is_empty() {
                        continue;
                    }
                    a.remember_id(messages, idx);
                    // A harness's injected text (a reminder, a background task's report) is a
                    // note, not something the user asked.
                    match injected_tag(text) {
                        Some(tag) => a.add_note(&mut note_shapes, idx, tag, &without_markup(text)),
                        None => {
                            // Blocks a harness wrapped around what the user typed are notes,
                            // and so is a preamble a gateway put before it (metadata, system
                            // lines): the user's own words are what follows.
                            let (own, blocks) = split_injected(text);
                            for (tag, block) in blocks {
                                a.add_note(&mut note_shapes, idx, &tag, &block);
                            }
                            let (own, preamble) = split_preamble(&own);
                            for (label, block) in preamble {
                                a.add_note(&mut note_shapes, idx, &label, &block);
                            }
                            if !own.is_empty() {
                                a.user_texts.push((idx, own));
                            }
                        }
                    }
                }
                Some("assistant") => {
                    if str_field(m, "stopReason") == Some("error") {
                        a.remember_id(messages, idx);
                    }
                    a.read_assistant(idx, m, &mut by_id)
                }
                Some("toolResult") => a.read_tool_result(messages, idx, m, &by_id),
                Some("bashExecution") => {
                    if truthy(m.get("excludeFromContext")) {
                        continue;
                    }
                    let command = str_field(m, "command").unwrap_or("").to_string();
                    let output = str_field(m, "output").unwrap_or("");
                    let exit = m.get("exitCode").and_then(Value::as_f64);
                    if exit.is_some_and(|c| c != 0.0) {
                        a.remember_id(messages, idx);
                    }
                    let outcome = if truthy(m.get("cancelled")) {
                        Outcome::Cancelled
                    } else if hidden_failure(&command, output) {
                        a.remember_id(messages, idx);
                        Outcome::Fail {
                            code: None,
                            text: clip_ends(output, 1000, 3000),
                        }
                    } else {
                        match exit {
                            Some(c) if is_no_match(&command, Some(c as i64), output) => {
                                Outcome::Ok {
                                    exit: Some(c as i64),
                                }
                            }
                            Some(c) if c != 0.0 => Outcome::Fail {
                                code: Some(c as i64),
                                text: clip_ends(output, 1000, 3000),
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
                    let text = string_text(m.get("content"), "");
                    if !text.trim().is_empty() {
                        let label = str_field(m, "customType").unwrap_or("custom");
                        a.remember_id(messages, idx);
                        a.add_note(&mut note_shapes, idx, label, text.trim());
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

    /// Requests the earlier summary's goal already quoted with another date, time or count (see
    /// `noise::quoted_key`), or its boilerplate lines already count (`earlier_boilerplate`):
    /// a text sent again in every span (a heartbeat) is boilerplate over the whole session,
    /// though no one span repeats it. Such requests become boilerplate, and the earlier
    /// summary's goal lines quoting them are dropped from `goals`.
    pub(in super::super) fn requests_sent_before(
        &mut self,
        goals: &mut Vec<(u64, super::super::merge::GoalRole, String)>,
        earlier_boilerplate: &dyn Fn(&str) -> bool,
    ) {
        if self.requests.is_empty() {
            return;
        }
        let collapse = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        let earlier: Vec<(String, String)> = goals
            .iter()
            .map(|(_, _, t)| (quoted_key(t), collapse(without_reference(t))))
            .collect();
        let mut again: Vec<String> = Vec::new();
        let requests = std::mem::take(&mut self.requests);
        for (idx, text) in requests {
            let key = quoted_key(&text);
            let said = collapse(&text);
            // Only a text that differs in its time or counts is sent by a machine; the same
            // words typed again are the user asking again, and stay a request.
            let timed = earlier
                .iter()
                .any(|(k, t)| *k == key && !said.starts_with(t.trim_end_matches(['…', ' '])));
            if timed || earlier_boilerplate(&text) {
                // The earlier summary's goal line quoting it was one sending too.
                let quoted = usize::from(timed && !again.contains(&key));
                match self
                    .boilerplate
                    .iter_mut()
                    .find(|b| quoted_key(&b.1) == key)
                {
                    Some(b) => b.2 += 1 + quoted,
                    None => self.boilerplate.push((idx, text, 1 + quoted)),
                }
                again.push(key);
            } else {
                self.requests.push((idx, text));
            }
        }
        goals.retain(|(_, _, t)| !again.contains(&quoted_key(t)));
    }

    /// Keeps the entry id of message `idx` (see [`Analysis::entry_ids`]).
    fn remember_id(&mut self, messages: super::super::Messages<'_>, idx: usize) {
        if let Some(id) = messages.entry_id(idx) {
            self.entry_ids.insert(idx, id.to_string());
        }
    }

    /// Adds an injected note. Injected notes are re-sent, verbatim or with another timestamp
    /// or count: a note of a shape already seen is counted there and its text becomes the
    /// latest one (the latest word), under its first position.
    fn add_note(
        &mut self,
        shapes: &mut BTreeMap<String, usize>,
        idx: usize,
        label: &str,
        text: &str,
    ) {
        let key = format!("{label}\u{1f}{}", shape(text));
        match shapes.get(&key).and_then(|&n| self.notes.get_mut(n)) {
            Some(n) => {
                n.text = text.to_string();
                n.count += 1;
                n.last_idx = idx;
            }
            None => {
                shapes.insert(key, self.notes.len());
                self.notes.push(Note {
                    idx,
                    label: clip_head(label, 60),
                    text: text.to_string(),
                    count: 1,
                    last_idx: idx,
                });
            }
        }
    }

    /// Splits the user texts into requests, acknowledgements and boilerplate. Boilerplate is a
    /// long text the session repeats (verbatim, or with other dates, times or counts), or one
    /// whose first line is a bare slash command (`/new`) followed by injected instructions.
    /// Small talk, bare commands and texts of rules only are no requests either.
    fn classify_user_texts(&mut self) {
        // Texts that differ only in a date, time or count (see `noise::sent_shape`: a heartbeat,
        // a hook's report) count as the same text sent again.
        let shapes: Vec<String> = self.user_texts.iter().map(|(_, t)| sent_shape(t)).collect();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &shapes {
            *counts.entry(s.as_str()).or_default() += 1;
        }
        let mut boilerplate: Vec<(usize, String, usize)> = Vec::new();
        let mut boilerplate_shapes: Vec<&str> = Vec::new();
        let mut requests = Vec::new();
        let mut slash_commands = Vec::new();
        for ((idx, text), text_shape) in self.user_texts.iter().zip(&shapes) {
            if is_slash_command(text) {
                slash_commands.push((*idx, text.clone()));
                continue;
            }
            let repeated = counts.get(text_shape.as_str()).copied().unwrap_or(0);
            let first = text.lines().next().unwrap_or("").trim();
            let slash = text.lines().count() > 1
                && first.starts_with('/')
                && first.len() > 1
                && !first.contains(char::is_whitespace);
            // A long text repeated is boilerplate; a short repeated one ("fix it") is not.
            if (repeated > 1 && text.chars().count() >= 40) || slash {
                // Stated once, with its latest text (the latest time, the latest count).
                match boilerplate_shapes.iter().position(|s| *s == text_shape) {
                    Some(k) => boilerplate[k].1 = text.clone(),
                    None => {
                        boilerplate_shapes.push(text_shape);
                        boilerplate.push((*idx, text.clone(), repeated));
                    }
                }
            } else if !is_trivial_message(text) && (!states_only_rules(text) || reports_error(text))
            {
                // A text of rules only is Constraints & Preferences, not a task; a pasted error
                // whose wording reads like rules ("… must have …") reports a problem.
                requests.push((*idx, text.clone()));
            }
        }
        // The latest user text, when it asks for nothing ("yes please", `ls`): it answers the
        // last question, so it is context, not the goal.
        self.last_ack = self
            .user_texts
            .iter()
            .rev()
            .find(|(_, t)| !is_slash_command(t))
            .filter(|(_, t)| is_trivial_message(t))
            .cloned();
        self.slash_commands = slash_commands;
        self.requests = requests;
        self.boilerplate = boilerplate;
    }

    pub(in super::super) fn read_assistant(
        &mut self,
        idx: usize,
        m: &Value,
        by_id: &mut BTreeMap<String, usize>,
    ) {
        let text = string_text(m.get("content"), "\n");
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

    pub(in super::super) fn read_tool_result(
        &mut self,
        messages: super::super::Messages<'_>,
        idx: usize,
        m: &Value,
        by_id: &BTreeMap<String, usize>,
    ) {
        let text = string_text(m.get("content"), "");
        let slot = str_field(m, "toolCallId")
            .and_then(|id| by_id.get(id))
            .copied()
            .filter(|&i| self.actions.get(i).is_some_and(|a| a.outcome.is_none()));
        let command = slot.and_then(|i| match &self.actions[i].kind {
            ActionKind::Command(c) => Some(c.as_str()),
            _ => None,
        });
        let hidden = command.is_some_and(|c| hidden_failure(c, &text));
        let outcome = if hidden {
            self.remember_id(messages, idx);
            Outcome::Fail {
                code: None,
                text: clip_ends(&text, 1000, 3000),
            }
        } else if truthy(m.get("isError")) {
            let code = EXIT_CODE_RE
                .captures(&text)
                .and_then(|c| c.get(1))
                .and_then(|c| c.as_str().parse::<i64>().ok());
            if command.is_some_and(|c| is_no_match(c, code, &text)) {
                Outcome::Ok { exit: code }
            } else {
                self.remember_id(messages, idx);
                Outcome::Fail {
                    code,
                    text: clip_ends(&text, 1000, 3000),
                }
            }
        } else {
            Outcome::Ok { exit: None }
        };
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
                        .map(|l| clip_head(&deblob(l), 80));
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
}

/// Whether a user text holds a pasted error report (see `noise::is_error_report`).
fn reports_error(text: &str) -> bool {
    text.lines().any(is_error_report)
}

/// A todo list written by a tool (`todos: [{content, status}]`, as several harnesses do).
pub(in super::super) fn todo_list(args: Option<&Value>) -> Option<Vec<(String, String)>> {
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
