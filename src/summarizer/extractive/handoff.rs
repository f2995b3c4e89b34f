//! The facts a handoff owes (`crate::handoff`), read by the same pass and the same queries the
//! extractive summary's sections are filled from: the latest request and the rules (Goal,
//! Constraints), the plan's steps left and the calls without a result (Next Steps, In
//! Progress), the failures nothing answered (Blocked), the commands run, and what an earlier
//! summary still carries (its constraints, its open blockers, its plan, its repair section).
//! One reading of a span, two uses: what the summary says, and what any summary must say.

use super::facts::{command_key, is_verification, ActionKind, Analysis, Outcome, Resolution};
use super::layout::{strip_labels, BLOCKED, CONSTRAINTS, GOAL};
use super::merge::{carried_plan, parse_summary};
use super::plan;
use super::Messages;
use crate::handoff::{repair, Facts, Failure, FileChange, Kind, Said};

/// What a handoff of one compaction is read from.
pub struct HandoffInput<'a> {
    /// The span being summarized (Pi's `messagesToSummarize`).
    pub messages: Messages<'a>,
    /// A split turn's prefix (empty otherwise).
    pub turn_prefix: Messages<'a>,
    /// The summary being updated, without compactd's pins and recall footer.
    pub previous_summary: Option<&'a str>,
    /// The compaction entry holding it: what its obligations name.
    pub previous_id: Option<&'a str>,
    /// Pi's file lists of the compaction: written and edited paths (the span's, and an
    /// earlier compaction's `details`).
    pub written: &'a [String],
    pub edited: &'a [String],
}

/// One part of the span (the history, a split turn's prefix) and its analysis.
struct Part<'a> {
    messages: Messages<'a>,
    a: Analysis,
}

impl Part<'_> {
    fn id(&self, idx: usize) -> Option<&str> {
        self.messages.entry_id(idx)
    }

    fn said(&self, idx: usize, text: &str) -> Said {
        Said::new(text, self.id(idx))
    }
}

/// The facts of `input` (see the module doc).
pub fn handoff_facts(input: &HandoffInput<'_>) -> Facts {
    let parts = [
        Part {
            messages: input.messages,
            a: Analysis::of(input.messages),
        },
        Part {
            messages: input.turn_prefix,
            a: Analysis::of(input.turn_prefix),
        },
    ];
    let previous = input
        .previous_summary
        .map(|s| repair::strip_section(s.trim()))
        .and_then(parse_summary)
        .unwrap_or_default();
    let earlier = |section: usize| {
        previous
            .iter()
            .filter(move |(s, ..)| *s == Some(section))
            .map(|(_, text, _)| strip_labels(text.trim()))
    };
    let prev = |text: &str| Said::new(text, input.previous_id);

    // The latest request: the split turn's, the span's, else the one the earlier summary named.
    let request = parts
        .iter()
        .rev()
        .find_map(|p| p.a.requests.last().map(|(i, t)| p.said(*i, t)))
        .or_else(|| {
            let goals: Vec<(&str, &str)> = previous
                .iter()
                .filter(|(s, ..)| *s == Some(GOAL))
                .map(|(_, t, _)| (t.as_str(), strip_labels(t.trim())))
                .collect();
            goals
                .iter()
                .rev()
                .find(|(t, _)| t.starts_with("(latest) "))
                .or(goals.last())
                .map(|(_, t)| prev(t))
        });
    let mut f = Facts {
        request,
        ..Facts::default()
    };
    for p in &parts {
        f.user_words
            .extend(p.a.requests.iter().map(|(i, t)| p.said(*i, t)));
    }

    // Rules: the earlier summary's, then the span's.
    f.constraints.extend(earlier(CONSTRAINTS).map(prev));
    for p in &parts {
        for (i, sentence) in p.a.constraints() {
            f.user_words.push(p.said(i, &sentence));
            f.constraints.push(p.said(i, &sentence));
        }
    }

    // Open tasks: the plan's steps left (the earlier summary's plan followed through the span)
    // and calls still waiting for their result.
    let carried_steps = input.previous_summary.map(carried_plan).unwrap_or_default();
    for (k, p) in parts.iter().enumerate() {
        let plans = plan::track(&p.a, if k == 0 { &carried_steps } else { &[] });
        for step in &plans.left {
            let id = step.from.and_then(|i| p.id(i)).or(input.previous_id);
            f.open_tasks.push(Said::new(step.text.as_str(), id));
        }
        if k == 0 {
            for act in p.a.actions.iter().filter(|a| a.outcome.is_none()) {
                let text = format!("{} (no result yet)", act.label());
                f.open_tasks.push(p.said(act.idx, &text));
            }
        }
    }

    // The turn in progress: what the last assistant message says comes next.
    if let Some(p) = parts.iter().rev().find(|p| !p.a.assistant_texts.is_empty()) {
        let at = p.a.assistant_texts.last().map_or(0, |(i, _)| *i);
        for clause in p.a.said_next() {
            f.open_tasks.push(p.said(at, &clause));
        }
    }

    // Failures nothing answered: the earlier summary's open blockers, then the span's.
    let [history, prefix] = &parts;
    let open = |item: &str| {
        history.a.resolves(item) == Resolution::Open && prefix.a.resolves(item) == Resolution::Open
    };
    for item in earlier(BLOCKED).filter(|i| open(i)) {
        f.carried.push((Kind::Failure, prev(item)));
    }
    for (k, p) in parts.iter().enumerate() {
        for fail in p.a.open_failures() {
            // A history failure the split turn's start settled is no longer open.
            if k == 0 && prefix.a.resolves(&fail.label) != Resolution::Open {
                continue;
            }
            let key = match fail.kind {
                ActionKind::Command(c) => Some(command_key(c)),
                ActionKind::FileOp { path, .. } => Some(path.clone()),
                ActionKind::Tool(name, _) => Some(name.clone()),
                ActionKind::AssistantError => None,
            };
            f.failures.push(Failure {
                label: fail.label.clone(),
                key,
                headline: fail.headline_line(200),
                entry_id: p.id(fail.at).or(p.id(fail.idx)).map(str::to_owned),
            });
        }
    }

    // Modified files (Pi's lists, and what other harnesses' file tools changed), the ones the
    // span touched last in the order it last touched them.
    let other_tools: Vec<String> = parts
        .iter()
        .flat_map(|p| p.a.file_lists().1)
        .filter(|p| !input.written.contains(p) && !input.edited.contains(p))
        .collect();
    let mut files: Vec<(Option<usize>, FileChange)> = Vec::new();
    for path in input.written.iter().chain(input.edited).chain(&other_tools) {
        if files.iter().any(|(_, c)| c.path == *path) {
            continue;
        }
        let change = match (input.written.contains(path), input.edited.contains(path)) {
            (true, true) => "written and edited",
            (true, false) => "written",
            _ => "edited",
        };
        let touched = parts.iter().enumerate().find_map(|(k, p)| {
            p.a.actions
                .iter()
                .rev()
                .find(|act| {
                    matches!(&act.kind, ActionKind::FileOp { tool, path: q } if tool != "read" && q == path)
                })
                .map(|act| (k * 1_000_000_000 + act.idx, p.id(act.idx)))
        });
        let (at, id) = match touched {
            Some((at, id)) => (Some(at), id),
            None => (None, input.previous_id),
        };
        files.push((
            at,
            FileChange {
                path: path.clone(),
                change: change.to_owned(),
                entry_id: id.map(str::to_owned),
            },
        ));
    }
    files.sort_by_key(|(at, _)| *at);
    f.files = files.into_iter().map(|(_, c)| c).collect();

    // The commands that verified the work: the latest successful run of each.
    for p in &parts {
        for act in &p.a.actions {
            let (ActionKind::Command(c), Some(Outcome::Ok { .. })) = (&act.kind, &act.outcome)
            else {
                continue;
            };
            let key = command_key(c);
            if !is_verification(&key) {
                continue;
            }
            f.commands.retain(|s| s.text != key);
            f.commands.push(p.said(act.idx, &key));
        }
    }

    // What an earlier repair section listed and the span did not settle.
    if let Some(prev_summary) = input.previous_summary {
        for m in repair::read_section(prev_summary) {
            let keep = match m.kind {
                Kind::Constraint | Kind::Identifier | Kind::Command => true,
                Kind::Failure => open(&m.text),
                // The span's own statement of what is left replaces an earlier one.
                Kind::OpenTask => !parts.iter().any(|p| p.a.todos.is_some()),
                // Re-read from the span and the file lists.
                Kind::Request | Kind::File => false,
            };
            if keep {
                f.carried.push((
                    m.kind,
                    Said::new(m.text, m.entry_id.as_deref().or(input.previous_id)),
                ));
            }
        }
    }
    f
}
