//! Plans as a first-class fact: a numbered or bulleted list of steps the user or the assistant
//! stated (or a todo tool wrote) is followed through the session. A step is done when a later
//! tool result or statement says so (a write to the file it names, a successful run of the
//! command it names, "step 3 is done", a sentence reporting the step's work as done); what is
//! left is the latest statement's steps that are not done, in its order. A later statement of
//! what is left replaces the earlier plan, so the latest word on what is left wins.
//!
//! Plans outlive a compaction: the steps left are rendered in Next Steps as
//! `(plan step N) …`, and an update reads them back as the plan the span continues.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use super::facts::{ActionKind, Analysis, Outcome};
use super::text::*;

/// The label of a step left in Next Steps, read back by the next update.
pub(super) fn step_label(number: Option<u32>) -> String {
    match number {
        Some(n) => format!("(plan step {n}) "),
        None => "(plan) ".to_string(),
    }
}

/// Reads a Next Steps item of an earlier summary back as a plan step, if it is one.
pub(super) fn parse_step_label(item: &str) -> Option<(Option<u32>, String)> {
    if let Some(rest) = item.strip_prefix("(plan) ") {
        return Some((None, rest.trim().to_string()));
    }
    let rest = item.strip_prefix("(plan step ")?;
    let (n, text) = rest.split_once(") ")?;
    Some((n.trim().parse().ok(), text.trim().to_string()))
}

/// One step of a plan.
#[derive(Clone)]
struct Step {
    /// The number the statement gave it (`3.`), or its position in a bulleted list.
    number: Option<u32>,
    text: String,
    done: bool,
    /// A todo tool marked it in progress.
    in_progress: bool,
    /// The message that stated it (`None`: an earlier summary's step).
    from: Option<usize>,
}

/// A step still to do, in plan order.
pub(super) struct LeftStep {
    pub(super) number: Option<u32>,
    pub(super) text: String,
    pub(super) in_progress: bool,
    /// The message that stated it (`None`: an earlier summary's step).
    pub(super) from: Option<usize>,
}

/// What the plans of a span come to.
#[derive(Default)]
pub(super) struct Plans {
    /// Steps finished, each once, in the order they were finished: (entry index, text).
    pub(super) done: Vec<(usize, String)>,
    /// Steps left, in the order of the latest statement.
    pub(super) left: Vec<LeftStep>,
    /// Whether the span itself stated a plan or what is left.
    pub(super) stated: bool,
}

/// How a statement relates to the plan before it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A plan: replaces the current one when it answers a newer request or restates it, else
    /// adds its steps.
    Full,
    /// What is left: replaces the current plan outright.
    Remaining,
    /// A todo tool's full list with states.
    Todo,
}

struct Statement {
    idx: usize,
    kind: Kind,
    /// Stated by the user (a user's plan is a new task and always replaces).
    by_user: bool,
    steps: Vec<Step>,
}

/// The lead line of a list that makes it a plan.
static PLAN_LEAD_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(plan|steps?|todo|to-do|tasks?|checklist|roadmap|phases?|milestones?|here's how|here is how|i'll|i will|we'll|we will|let's|going to|next)\b",
    )
    .expect("plan lead pattern is valid")
});

/// The lead line of a list that says what is left.
static REMAINING_LEAD_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(remaining|left|still to do|still need|to do|todo|next steps?|what's next|what is next|outstanding|open items)\b",
    )
    .expect("remaining lead pattern is valid")
});

/// The lead line of a list of something else (steps to reproduce, findings, options, an
/// explanation of how something works): not a plan, unless the lead also says it is one or
/// says what is left ("remaining issues").
static NOT_A_PLAN_LEAD_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(reproduce|repro|found|findings|errors?|failures?|warnings?|issues|problems|results?|output|options|alternatives|causes?|reasons?|how (?:[\w`'.-]+ ){0,5}(?:works?|behaves|is (?:built|done|structured|handled))|works like this|what happens|the flow|explanation|in short)\b",
    )
    .expect("not-a-plan lead pattern is valid")
});

/// A list item: number or bullet, an optional checkbox, the text.
static ITEM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:(\d{1,2})[.)]|[-*+•])\s+(?:\[([ xX])\]\s+)?(.+)$")
        .expect("list item pattern is valid")
});

/// "step 3", "steps 1 and 2", "steps 2-4": the numbers a sentence refers to.
static STEP_REF_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bsteps?\s+(\d{1,2})((?:\s*(?:,|and|&|to|-|–|through)\s*\d{1,2})*)")
        .expect("step reference pattern is valid")
});

/// The plan statements of one message text: lists of at least two items led by a plan or
/// what-is-left line. In a user's text any numbered list is a plan (the user lists tasks);
/// checkbox lists are plans wherever they are.
fn statements_in(idx: usize, text: &str, by_user: bool) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut lead = String::new();
    let mut run: Vec<(Option<u32>, Option<bool>, String, bool)> = Vec::new();
    let mut flush = |lead: &str, run: &mut Vec<(Option<u32>, Option<bool>, String, bool)>| {
        if run.len() >= 2 {
            let numbered = run.iter().all(|r| r.0.is_some());
            let checkboxes = run.iter().any(|r| r.1.is_some());
            let other_list =
                NOT_A_PLAN_LEAD_RE.is_match(lead) && !lead.to_lowercase().contains("plan");
            let kind = if REMAINING_LEAD_RE.is_match(lead) {
                Some(Kind::Remaining)
            } else if other_list {
                None
            } else if PLAN_LEAD_RE.is_match(lead) || checkboxes || (by_user && numbered) {
                Some(Kind::Full)
            } else {
                None
            };
            if let Some(kind) = kind {
                let steps = run
                    .iter()
                    .enumerate()
                    .map(|(k, (n, checked, text, _))| Step {
                        number: n.or(Some(k as u32 + 1)),
                        text: text.clone(),
                        done: checked.unwrap_or(false),
                        in_progress: false,
                        from: Some(idx),
                    })
                    .collect();
                out.push(Statement {
                    idx,
                    kind,
                    by_user,
                    steps,
                });
            }
        }
        run.clear();
    };
    for line in lines_outside_fences(text) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let indented = line.starts_with("  ") || line.starts_with('\t');
        match ITEM_RE.captures(trimmed) {
            // Sub-items belong to the step above them.
            Some(_) if indented && !run.is_empty() => {}
            Some(c) => {
                let number = c.get(1).and_then(|m| m.as_str().parse().ok());
                let checked = c.get(2).map(|m| !m.as_str().trim().is_empty());
                let body = c.get(3).map_or("", |m| m.as_str()).trim();
                let body = strip_done_marks(body);
                let struck = body.1;
                let same_kind = run.last().is_none_or(|r| r.0.is_some() == number.is_some());
                if !same_kind {
                    flush(&lead, &mut run);
                }
                run.push((number, checked.or(struck.then_some(true)), body.0, false));
            }
            None => {
                flush(&lead, &mut run);
                lead = trimmed.to_string();
            }
        }
    }
    flush(&lead, &mut run);
    out
}

/// A step text without the marks that say it is done (`~~…~~`, `✅`, `(done)`), and whether it
/// had one.
fn strip_done_marks(body: &str) -> (String, bool) {
    let mut t = body.trim();
    let mut done = false;
    if let Some(inner) = t.strip_prefix("~~").and_then(|r| r.strip_suffix("~~")) {
        t = inner;
        done = true;
    }
    for mark in ["✅", "✔", "(done)", "— done", "- done"] {
        if let Some(r) = t.strip_suffix(mark).or_else(|| t.strip_prefix(mark)) {
            t = r.trim();
            done = true;
        }
    }
    (t.to_string(), done)
}

/// The numbers a sentence refers to as steps ("steps 1 and 2", "steps 2-4", "step 3").
fn step_refs(sentence: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for m in STEP_REF_RE.find_iter(sentence) {
        let mut last: Option<u32> = None;
        let mut range = false;
        let mut num = String::new();
        let mut sep = String::new();
        for c in m.as_str().chars().chain(std::iter::once(' ')) {
            if c.is_ascii_digit() {
                if !sep.is_empty() {
                    range = matches!(
                        sep.trim().to_lowercase().as_str(),
                        "-" | "–" | "to" | "through"
                    );
                    sep.clear();
                }
                num.push(c);
                continue;
            }
            if let Ok(n) = num.parse::<u32>() {
                match last {
                    Some(l) if range && n > l && n - l <= 20 => out.extend(l + 1..=n),
                    _ => out.push(n),
                }
                last = Some(n);
                range = false;
            }
            num.clear();
            if last.is_some() {
                sep.push(c);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether a clause reporting work done is about `step`: it shares most of the step's content
/// words, or it is one word naming the step's first one ("Profiling is done").
pub(super) fn is_about(clause_stems: &[String], step_stems: &[String]) -> bool {
    let shared = step_stems
        .iter()
        .filter(|s| clause_stems.contains(s))
        .count();
    if shared == 0 {
        return false;
    }
    if clause_stems.len() == 1 && step_stems.first() == clause_stems.first() {
        return true;
    }
    if step_stems.len() <= 2 {
        return shared == step_stems.len();
    }
    shared >= 2 && shared * 2 >= step_stems.len()
}

/// The paths a step names (inline code or path-like words), each to be matched by a write.
fn step_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || matches!(c, '`' | ',' | '(' | ')')) {
        let w = word.trim_matches(|c: char| matches!(c, '.' | ':' | ';' | '"' | '\'' | '*'));
        let looks_like_path =
            (w.contains('/') && !w.contains("://") && w.len() > 2) || PATH_EXT_RE.is_match(w);
        if looks_like_path && !out.iter().any(|o: &String| o == w) {
            out.push(w.to_string());
        }
    }
    out
}

static PATH_EXT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[\w.-]+\.(?:rs|ts|tsx|js|jsx|mjs|py|go|rb|java|kt|swift|c|h|cc|cpp|hpp|cs|php|md|json|toml|ya?ml|sql|sh|css|scss|html|txt|lock|cfg|ini|tf|proto|gradle|xml)$")
        .expect("path extension pattern is valid")
});

/// Whether a write to `path` is a write of what `target` names.
fn same_path(path: &str, target: &str) -> bool {
    let target = target.trim_start_matches("./");
    let path = path.trim_start_matches("./");
    path == target
        || path.ends_with(&format!("/{target}"))
        || (target.ends_with('/') && path.contains(target))
}

/// The inline-code spans of a step that read as commands (they contain a space).
fn step_commands(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(k, s)| k % 2 == 1 && s.trim().contains(' '))
        .map(|(_, s)| s.trim().to_string())
        .collect()
}

/// What happened, in order, that can finish a step.
enum Evidence<'a> {
    /// A sentence (user or assistant) reporting work done.
    Said(usize, String),
    Wrote(usize, &'a str),
    Ran(usize, &'a str),
    Plan(Statement),
}

impl Evidence<'_> {
    fn idx(&self) -> (usize, u8) {
        match self {
            Evidence::Said(i, ..) => (*i, 0),
            Evidence::Wrote(i, _) | Evidence::Ran(i, _) => (*i, 1),
            Evidence::Plan(s) => (s.idx, 2),
        }
    }
}

/// Follows the plans of a span: `carried` are the steps an earlier summary left (its Next
/// Steps), the plan the span starts with.
pub(super) fn track(a: &Analysis, carried: &[(Option<u32>, String)]) -> Plans {
    let mut events: Vec<Evidence> = Vec::new();
    let requests: BTreeSet<usize> = a.requests.iter().map(|(i, _)| *i).collect();
    for (idx, text) in &a.requests {
        events.extend(
            statements_in(*idx, text, true)
                .into_iter()
                .map(Evidence::Plan),
        );
        for s in sentences(text) {
            events.push(Evidence::Said(*idx, s));
        }
    }
    for (idx, text) in &a.assistant_texts {
        events.extend(
            statements_in(*idx, text, false)
                .into_iter()
                .map(Evidence::Plan),
        );
        for s in sentences(text) {
            events.push(Evidence::Said(*idx, s));
        }
    }
    for (idx, list) in &a.todo_lists {
        let steps = list
            .iter()
            .map(|(content, status)| Step {
                number: None,
                text: content.clone(),
                done: is_done_status(status),
                in_progress: status.eq_ignore_ascii_case("in_progress")
                    || status.eq_ignore_ascii_case("in progress"),
                from: Some(*idx),
            })
            .collect();
        events.push(Evidence::Plan(Statement {
            idx: *idx,
            kind: Kind::Todo,
            by_user: false,
            steps,
        }));
    }
    for act in &a.actions {
        if !matches!(act.outcome, Some(Outcome::Ok { .. })) {
            continue;
        }
        match &act.kind {
            ActionKind::FileOp { tool, path } if tool != "read" => {
                events.push(Evidence::Wrote(act.done_idx, path.as_str()))
            }
            ActionKind::Command(c) => events.push(Evidence::Ran(act.done_idx, c.as_str())),
            _ => {}
        }
    }
    events.sort_by_key(Evidence::idx);
    let writes: Vec<(usize, &str)> = a
        .actions
        .iter()
        .filter(|act| matches!(act.outcome, Some(Outcome::Ok { .. })))
        .filter_map(|act| match &act.kind {
            ActionKind::FileOp { tool, path } if tool != "read" => {
                Some((act.done_idx, path.as_str()))
            }
            _ => None,
        })
        .collect();

    let mut plans = Plans::default();
    let mut current: Vec<Step> = carried
        .iter()
        .map(|(number, text)| Step {
            number: *number,
            text: text.clone(),
            done: false,
            in_progress: false,
            from: None,
        })
        .collect();
    // Index of the statement the current plan comes from (`None`: the earlier summary).
    let mut since: Option<usize> = None;
    let finish = |plans: &mut Plans, step: &mut Step, idx: usize| {
        if !step.done {
            step.done = true;
            if !plans.done.iter().any(|(_, t)| t == &step.text) {
                plans.done.push((idx, step.text.clone()));
            }
        }
    };
    for ev in events {
        match ev {
            Evidence::Plan(st) => {
                let newer_request = requests
                    .iter()
                    .any(|&r| since.is_none_or(|s| r > s) && r <= st.idx);
                let restates = st.steps.iter().any(|n| {
                    let ns = stems(&n.text);
                    current.iter().any(|c| {
                        let cs = stems(&c.text);
                        is_about(&ns, &cs) && is_about(&cs, &ns)
                    })
                });
                let replace = match st.kind {
                    Kind::Remaining | Kind::Todo => true,
                    Kind::Full => st.by_user || newer_request || restates || current.is_empty(),
                };
                let mut steps = st.steps;
                for step in steps.iter_mut().filter(|s| s.done) {
                    step.done = false;
                    finish(&mut plans, step, st.idx);
                }
                if replace {
                    current = steps;
                } else {
                    current.extend(steps);
                }
                since = Some(st.idx);
                plans.stated = true;
            }
            Evidence::Said(idx, sentence) => {
                for clause in clauses(&sentence) {
                    if !reports_done(&clause) {
                        continue;
                    }
                    let refs = step_refs(&clause);
                    let head = clause.split_once(':').map(|(h, _)| h.to_string());
                    let parts: Vec<Vec<String>> = std::iter::once(stems(&clause))
                        .chain(head.iter().map(|h| stems(h)))
                        .collect();
                    for step in current.iter_mut().filter(|s| !s.done) {
                        let by_number =
                            !refs.is_empty() && step.number.is_some_and(|n| refs.contains(&n));
                        let by_words = refs.is_empty() && {
                            let st = stems(&step.text);
                            parts.iter().any(|p| is_about(p, &st))
                        };
                        if by_number || by_words {
                            finish(&mut plans, step, idx);
                        }
                    }
                }
            }
            Evidence::Wrote(idx, path) => {
                if since.is_some_and(|s| idx <= s) {
                    continue;
                }
                for step in current.iter_mut().filter(|s| !s.done) {
                    let targets = step_paths(&step.text);
                    let base = path.rsplit('/').next().unwrap_or(path);
                    let names_file = base.len() >= 4
                        && (base.contains('.') || base.starts_with(char::is_uppercase))
                        && step
                            .text
                            .split(|c: char| c.is_whitespace() || c == '`')
                            .any(|w| w.trim_matches(['.', ',', ':']) == base);
                    // Every path the step names must have been written (it touched them all).
                    let all_written = targets.iter().any(|t| same_path(path, t))
                        && targets.iter().all(|t| {
                            writes.iter().any(|&(i, p)| {
                                i <= idx && since.is_none_or(|s| i > s) && same_path(p, t)
                            })
                        });
                    if all_written || names_file {
                        finish(&mut plans, step, idx);
                    }
                }
            }
            Evidence::Ran(idx, command) => {
                if since.is_some_and(|s| idx <= s) {
                    continue;
                }
                for step in current.iter_mut().filter(|s| !s.done) {
                    if step_commands(&step.text)
                        .iter()
                        .any(|c| c.trim() == command.trim())
                    {
                        finish(&mut plans, step, idx);
                    }
                }
            }
        }
    }
    plans.left = current
        .into_iter()
        .filter(|s| !s.done)
        .map(|s| LeftStep {
            number: s.number,
            text: s.text,
            in_progress: s.in_progress,
            from: s.from,
        })
        .collect();
    plans
}

pub(super) fn is_done_status(status: &str) -> bool {
    matches!(
        status.to_ascii_lowercase().as_str(),
        "completed" | "complete" | "done" | "finished"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_references() {
        assert_eq!(step_refs("Steps 1 and 2 are done"), vec![1, 2]);
        assert_eq!(step_refs("Step 3 is done too"), vec![3]);
        assert_eq!(step_refs("steps 2-4 finished"), vec![2, 3, 4]);
        assert_eq!(step_refs("steps 1, 2 and 5 are in"), vec![1, 2, 5]);
        assert!(step_refs("the next step is lint").is_empty());
    }
}
