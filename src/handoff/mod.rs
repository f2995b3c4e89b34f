//! Beyond Pi: a verified handoff. A summary replaces history the agent never sees again, so an
//! LLM's bad day (or a hook's, or the extractive summarizer's) would become the agent's memory.
//! compactd holds the whole span a summary replaces, so before one is installed it checks what
//! the summary carries against what the handoff owes, says how good it is, and (when asked)
//! repairs what is missing. Pure: text and facts in, obligations, scores and text out.
//!
//! - [`owed`]: the obligations of a span (the latest request, the user's rules, open tasks,
//!   unresolved failures, modified files, the exact identifiers the user gave, the commands
//!   that verify the work), each with the entry it came from, from the facts the extractive
//!   summarizer reads (`summarizer::extractive::handoff_facts`);
//! - [`check`]: whether a summary carries each obligation (an identifier appears exactly, a
//!   sentence when most of its content words do), per kind and overall;
//! - [`repair`]: the short section listing what a summary missed, each item naming its entry,
//!   the extra instructions of a retry, and reading a section back from an earlier summary;
//! - [`words`]: content words, shared with the extractive summarizer.
//!
//! What is done with a check is `compaction.handoff` ([`Mode`]); the daemon runs it where every
//! compaction's summary is made (`compactor::step`) and finished (`daemon::lifecycle::finish`).

pub mod check;
pub mod owed;
pub mod repair;
pub mod words;

pub use check::{check, Item, KindScore, Report};
pub use owed::{owed, Facts, Failure, FileChange, Said};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a handoff owes the agent that resumes the work.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "HandoffKind")]
pub enum Kind {
    /// The latest thing the user asked for.
    Request,
    /// An explicit instruction, rule or preference of the user's.
    Constraint,
    /// A todo or plan item not done, a call still waiting for its result.
    OpenTask,
    /// A failing command or tool that nothing later answered.
    Failure,
    /// A file the work modified.
    File,
    /// A number, version, port, URL, id, path or environment variable name the user gave.
    Identifier,
    /// A command that verifies the work (a test or build that was run).
    Command,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Request,
        Kind::Constraint,
        Kind::OpenTask,
        Kind::Failure,
        Kind::File,
        Kind::Identifier,
        Kind::Command,
    ];

    /// The name in `byKind` and in `missing[].kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Constraint => "constraint",
            Kind::OpenTask => "openTask",
            Kind::Failure => "failure",
            Kind::File => "file",
            Kind::Identifier => "identifier",
            Kind::Command => "command",
        }
    }

    /// How a line of the repair section names the kind (read back by `repair::read_section`).
    pub fn label(self) -> &'static str {
        match self {
            Kind::Request => "Latest request",
            Kind::Constraint => "Constraint",
            Kind::OpenTask => "Open task",
            Kind::Failure => "Unresolved failure",
            Kind::File => "Modified file",
            Kind::Identifier => "Identifier",
            Kind::Command => "Verification command",
        }
    }
}

/// What a summary must hold for an obligation to count as carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needle {
    /// This text, exactly (whitespace runs count as one space), not inside a longer word: an
    /// identifier, a path, a command.
    Exact(String),
    /// At least `need` of these content words (see [`words::stems`]): a sentence said in other
    /// words still counts.
    Words { stems: Vec<String>, need: usize },
}

/// One thing the handoff owes, with the entry it came from (`None`: no entry names it, e.g. a
/// summary written from values without entry ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obligation {
    pub kind: Kind,
    /// What is owed, on one line, as the repair section states it.
    pub text: String,
    pub entry_id: Option<String>,
    /// All must hold.
    pub needles: Vec<Needle>,
}

/// `compaction.handoff`: what compactd does with a summary's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "HandoffMode")]
pub enum Mode {
    /// No check.
    Off,
    /// Check and report the score; the summary is installed as written.
    #[default]
    Report,
    /// Check, and append a short section of what the summary missed before it is installed.
    Repair,
    /// Check; an LLM summarizer gets one more call with what its summary missed as extra
    /// instructions, then what is still missing is repaired.
    Retry,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Report => "report",
            Mode::Repair => "repair",
            Mode::Retry => "retry",
        }
    }

    /// The mode a settings value names (`None`: not one of the four).
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "off" => Mode::Off,
            "report" => Mode::Report,
            "repair" => Mode::Repair,
            "retry" => Mode::Retry,
            _ => return None,
        })
    }

    /// Whether a summary is checked at all.
    pub fn checks(self) -> bool {
        self != Mode::Off
    }

    /// Whether what a summary missed is appended to it.
    pub fn repairs(self) -> bool {
        matches!(self, Mode::Repair | Mode::Retry)
    }
}

/// A summary's obligations as the summarization step leaves them for finishing: what it owes,
/// the mode it is checked in, and (after a retry) the first summary's score.
#[derive(Debug, Clone, PartialEq)]
pub struct Owed {
    pub mode: Mode,
    pub obligations: Vec<Obligation>,
    /// The score of the summary before a `retry` call (`None`: no call was made).
    pub first_score: Option<f64>,
}

impl Owed {
    /// The check of `summary` against these obligations.
    pub fn report(&self, summary: &str) -> Report {
        let mut report = check(summary, &self.obligations, self.mode);
        report.first_score = self.first_score;
        report
    }

    /// The check of `summary` and, when the mode repairs, `summary` with what it missed
    /// appended (`repair::repaired`); unchanged otherwise.
    pub fn finish(&self, summary: String) -> (String, Report) {
        let mut report = self.report(&summary);
        if !self.mode.repairs() || report.missing.is_empty() {
            return (summary, report);
        }
        report.repaired = report.missing.len();
        (repair::repaired(&summary, &report.missing), report)
    }
}
