//! Reading the messages: one chronological pass ([`reading`]) turns the transcript into actions
//! (tool calls and commands, classified by [`calls`], and model errors) with outcomes, and the
//! queries the sections are filled from ([`queries`]): which failures are still open, what was
//! done, what is pending, what comes next.

use std::collections::BTreeMap;

use serde_json::Value;

mod calls;
mod queries;
mod reading;

pub(super) use calls::*;
pub(super) use queries::EXPLORED;

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
    /// What failed (the command, tool or file operation).
    pub(super) kind: &'a ActionKind,
    /// Where its outcome was seen (the result holding the whole output).
    pub(super) at: usize,
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

    /// The line of the output that says what went wrong (see [`error_headline`]), without the
    /// colon some end on (`… panicked at src/lib.rs:71:9:`): quoted in a sentence, it ends it.
    pub(super) fn headline(&self) -> &str {
        error_headline(self.text).trim_end_matches([':', ' '])
    }

    /// The headline on one line, within `cap` and within what the item's label (a long command)
    /// leaves of a line a person reads (`noise::ITEM_MAX`).
    pub(super) fn headline_line(&self, cap: usize) -> String {
        let room = super::noise::ITEM_MAX
            .saturating_sub(crate::json::utf16_len(&self.label) + 40)
            .max(80);
        first_line(self.headline(), cap.min(room))
    }

    pub(super) fn code_note(&self) -> String {
        match (self.cancelled, self.code) {
            (true, _) => " (cancelled)".to_string(),
            (false, Some(c)) => format!(" (exit code {c})"),
            (false, None) => String::new(),
        }
    }
}

/// An injected note: an extension's message or a harness text wrapped in a tag, stated once
/// however often it was sent.
pub(super) struct Note {
    /// Where it was first sent.
    pub(super) idx: usize,
    /// The extension's `customType`, or the wrapping tag.
    pub(super) label: String,
    /// The latest text sent (the latest time, count or status).
    pub(super) text: String,
    /// How often a note of this shape was sent.
    pub(super) count: usize,
    /// Where it was last sent.
    pub(super) last_idx: usize,
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
    /// Injected notes (extension messages, harness texts wrapped in a tag), each shape once
    /// (see `noise::shape`).
    pub(super) notes: Vec<Note>,
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
    /// Session entry ids of the messages whose text a summary may only give the point of
    /// (user texts, notes, failed results), by index: where the whole text can be fetched.
    pub(super) entry_ids: BTreeMap<usize, String>,
}

pub(super) fn str_field<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a `content` field as the extractive summarizer reads it: a string, or the string
/// `text` of its text blocks joined with `sep`. Unlike Pi's serializer
/// (`compaction::serialize::content_text`, which coerces a non-string `text` as JavaScript's
/// join does), a block whose `text` is not a string is skipped: it is no prose to quote.
pub(super) fn string_text(content: Option<&Value>, sep: &str) -> String {
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
