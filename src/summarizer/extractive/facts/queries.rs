//! The questions the summary's sections ask of the analysis: the constraints and decisions,
//! which failures are still open (or were fixed by a re-run or a statement), what was done,
//! what is in progress and what comes next.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use super::super::layout::Caps;
use super::super::plan::{is_about, is_done_status, step_label, Plans};
use super::super::text::*;
use super::*;

impl Analysis {
    /// 0..=1000 by position in the span, so newer facts win ties within a priority band.
    pub(in super::super) fn recency(&self, idx: usize) -> u32 {
        let n = self.n.max(1) as u64;
        ((idx as u64).min(n) * 1000 / n) as u32
    }

    /// User sentences that state a rule or a preference: questions ask and set no rule, and a
    /// task described with a weak marker ("Add a flag that … without …") is a request.
    pub(in super::super) fn constraints(&self) -> Vec<(usize, String)> {
        self.user_sentences(&CONSTRAINT_RE)
            .into_iter()
            .filter(|(_, s)| is_constraint(s))
            .collect()
    }

    /// User sentences matching `re`, questions left out (a question asks; it sets no rule).
    /// Slash commands are not sentences of the user's.
    pub(in super::super) fn user_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
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
    pub(in super::super) fn failures(&self) -> Vec<FailedAction<'_>> {
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
                    // The cheap test first: masking every line of every later failure's output
                    // was a fifth of a 100 MB session's compaction.
                    exactly_same_action(&l.kind, &act.kind)
                        && matches!(&l.outcome, Some(Outcome::Fail { text: t, .. }) if !still_shows(t, headline))
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
    pub(in super::super) fn resolves(&self, item: &str) -> Resolution {
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
    pub(in super::super) fn reruns(&self, item: &str) -> bool {
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
    pub(in super::super) fn decisions(&self) -> Vec<(usize, String)> {
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
    pub(in super::super) fn done_items(&self) -> Vec<DoneItem> {
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
    pub(in super::super) fn reported_work(&self, cap: usize) -> Vec<DoneItem> {
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
    pub(in super::super) fn in_progress(&self, caps: &Caps) -> Vec<(usize, String)> {
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
    pub(in super::super) fn next_steps(
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
    pub(in super::super) fn said_next(&self) -> Vec<String> {
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
    pub(in super::super) fn command_histories(&self) -> Vec<CommandHistory> {
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
    pub(in super::super) fn file_lists(&self) -> (Vec<String>, Vec<String>) {
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

pub(in super::super) fn pick_sentences(
    texts: &[(usize, String)],
    re: &Regex,
) -> Vec<(usize, String)> {
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
