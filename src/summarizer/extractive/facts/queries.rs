//! The questions the summary's sections ask of the analysis: the constraints and decisions,
//! which failures are still open (or were fixed by a re-run or a statement), what was done,
//! what is in progress and what comes next.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use super::super::layout::Caps;
use super::super::noise::{
    command_shape, excerpt, gist, is_error_report, is_look_tool, sent_shape, sentences_within,
    ITEM_MAX,
};
use super::super::plan::{is_about, is_done_status, step_label, Plans};
use super::super::text::*;
use super::*;
use crate::json::utf16_len;

impl Analysis {
    /// The point of a long text of message `idx` in one line of at most `cap` units, naming
    /// the entry that holds it whole (see `noise::gist`).
    pub(in super::super) fn gist(&self, idx: usize, text: &str, cap: usize) -> String {
        gist(text, cap, self.entry_ids.get(&idx).map(String::as_str))
    }

    /// A failure's output in a few lines (see `noise::excerpt`) that fit one item together with
    /// its heading line `head`, naming the entry that holds the whole output.
    pub(in super::super) fn excerpt(&self, fail: &FailedAction, head: &str, cap: usize) -> String {
        let room = ITEM_MAX
            .saturating_sub(utf16_len(head))
            .clamp(120, cap.max(120));
        let entry = self.entry_ids.get(&fail.at).map(String::as_str);
        excerpt(fail.text.trim(), error_headline(fail.text), room, entry)
    }

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

    /// User sentences matching `re`, questions left out (a question asks; it sets no rule),
    /// slash commands too, and lines that report an error: a provider's or tool's message the
    /// user pasted ("Each `tool_use` block must have …") is quoted error
    /// text, and its modal verbs set no rule (see `noise::is_error_report`).
    fn user_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
        // Boilerplate the harness sends again and again (a heartbeat's "Do not infer or repeat
        // old tasks") sets no rule of the user's; it is stated once, in Critical Context.
        let boilerplate: Vec<String> = self
            .boilerplate
            .iter()
            .map(|(_, t, _)| sent_shape(t))
            .collect();
        let texts: Vec<(usize, String)> = self
            .user_texts
            .iter()
            .filter(|(_, t)| !is_slash_command(t))
            .filter(|(_, t)| boilerplate.is_empty() || !boilerplate.contains(&sent_shape(t)))
            .map(|(idx, t)| {
                let kept: Vec<&str> = t.lines().filter(|l| !is_error_report(l)).collect();
                (*idx, kept.join("\n"))
            })
            .collect();
        pick_sentences(&texts, re)
            .into_iter()
            .filter(|(_, s)| !is_question(s))
            .collect()
    }

    /// Problems the user reported (a symptom: an HTTP error status, something that does not
    /// work, loads or builds, an empty result, a crash or a hang) that nothing after the report
    /// answered: no later assistant clause reports work done or a fix, and the user did not say
    /// it works. They are open whatever else the session turned to.
    pub(in super::super) fn open_reports(&self) -> Vec<(usize, String)> {
        static SYMPTOM_RE: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
            Regex::new(
                r"(?i)\b(?:returns?|returning|gives?|giving|get|gets|getting|throws?|throwing|shows?|showing|responds? with)\s+(?:an?\s+|the\s+)?(?:[45]\d\d|error|exception|blank|empty|nothing|null|nan)\b|\b(?:doesn't|does not|don't|do not|isn't|is not|won't|will not|can't|cannot|no longer)\s+(?:\w+\s+)?(?:work|load|start|build|compile|connect|run|respond|open|render|send|sync|save|boot|show|appear)\w*|\b(?:is|are|seems?|looks?)\s+(?:\w+\s+)?(?:broken|down|stuck|hanging|corrupt\w*)\b|\b(?:crash(?:es|ed|ing)?|hangs|times out|timing out|timed out)\b|\bwrites? an? empty\b",
            )
            .expect("symptom pattern is valid")
        });
        let boilerplate: Vec<String> = self
            .boilerplate
            .iter()
            .map(|(_, t, _)| sent_shape(t))
            .collect();
        self.user_texts
            .iter()
            .filter(|(_, t)| !is_slash_command(t) && !boilerplate.contains(&sent_shape(t)))
            .filter(|(_, t)| {
                t.lines()
                    .any(|l| !is_error_report(l) && SYMPTOM_RE.is_match(l))
            })
            .filter(|(idx, _)| {
                let answered = self.assistant_texts.iter().any(|(at, said)| {
                    *at > *idx
                        && sentences(said)
                            .iter()
                            .flat_map(|s| clauses(s))
                            .any(|c| reports_done(&c))
                });
                let works = self.user_texts.iter().any(|(at, said)| {
                    *at > *idx && FIXED_RE.is_match(said) && !NEGATION_RE.is_match(said)
                });
                !answered && !works
            })
            .cloned()
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
                kind: &act.kind,
                at: act.done_idx,
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

    /// The failures still open, each error once: the same error from two commands (a build and
    /// a test run stopping at one compile error) is one blocker, under its latest command.
    pub(in super::super) fn open_failures(&self) -> Vec<FailedAction<'_>> {
        let mut seen: Vec<String> = Vec::new();
        let mut out: Vec<FailedAction<'_>> = Vec::new();
        for fail in self.failures().into_iter().rev().filter(|f| !f.resolved) {
            let key = masked(fail.headline());
            if key.trim().is_empty() || !seen.contains(&key) {
                seen.push(key);
                out.push(fail);
            }
        }
        out.reverse();
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
    /// that command again (or one of its shape), so its own line has the latest outcomes.
    pub(in super::super) fn reruns(&self, item: &str) -> bool {
        let Some(cmd) = item
            .strip_prefix("Command `")
            .and_then(|r| r.split('`').next())
        else {
            return false;
        };
        // The same command with other numbers counts: this span's line has its runs.
        let wanted = command_shape(cmd);
        self.actions.iter().any(|a| {
            matches!(&a.kind, ActionKind::Command(c)
                if code(c, 160) == format!("`{cmd}`") || command_shape(c.trim()) == wanted)
        })
    }

    /// Key Decisions: sentences announcing a choice or giving an approach up. A short
    /// abandonment ("Abandoning pgloader.") keeps the sentence before it, which gives the reason.
    ///
    /// Only statements: a lead-in ("The approach:") is completed by the sentence it leads into,
    /// or dropped when nothing follows; a fragment of two words or one ending on a word no
    /// sentence ends on is dropped (see [`is_statement`]).
    pub(in super::super) fn decisions(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (idx, text) in &self.assistant_texts {
            let all = sentences(text);
            // The sentence a lead-in was completed with is said already.
            let mut said_with_lead_in = None;
            for (k, s) in all.iter().enumerate() {
                if said_with_lead_in == Some(k) {
                    continue;
                }
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
                let stated = if is_lead_in(&with_reason) {
                    match all.get(k + 1) {
                        Some(next) if !is_lead_in(next) => {
                            said_with_lead_in = Some(k + 1);
                            format!("{with_reason} {next}")
                        }
                        _ => continue,
                    }
                } else {
                    with_reason
                };
                if is_statement(&stated) {
                    out.push((*idx, stated));
                }
            }
        }
        out
    }

    /// Successful file changes (one line per path), commands (one line per command shape: the
    /// same command with other numbers is the same command run again), calls of other tools
    /// (one line per tool and key argument, with the latest result), and one line for all the
    /// read-only exploration (commands and tools that only look): looking is no progress, but
    /// what was explored, and how much, is context.
    pub(in super::super) fn done_items(&self) -> Vec<DoneItem> {
        // path → (writes, edits, last index)
        let mut files: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
        // command shape → (latest command, last ok index, failed before, runs)
        let mut commands: BTreeMap<String, (&str, usize, bool, usize)> = BTreeMap::new();
        let mut failed_commands: BTreeSet<String> = BTreeSet::new();
        let mut tools: BTreeMap<(&str, Option<&str>), ToolRuns> = BTreeMap::new();
        // What was explored: (name, calls) in first-seen order, and the last index.
        let mut looked: Vec<(String, usize)> = Vec::new();
        let mut looked_last = 0usize;
        let mut look = |what: String, idx: usize| {
            match looked.iter_mut().find(|(w, _)| *w == what) {
                Some((_, n)) => *n += 1,
                None => looked.push((what, 1)),
            }
            looked_last = looked_last.max(idx);
        };
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
                ActionKind::Command(c) if ok && is_exploration(c) => look(look_name(c), act.idx),
                ActionKind::Command(c) if ok => {
                    let key = command_shape(c.trim());
                    let before = failed_commands.contains(&key);
                    let runs = commands.get(&key).map_or(0, |e| e.3);
                    commands.insert(key, (c.as_str(), act.idx, before, runs + 1));
                }
                ActionKind::Tool(name, _) if ok && is_look_tool(name) => {
                    look(name.clone(), act.idx)
                }
                // Writing the todo list states the plan (see `plan`); it is no work done.
                ActionKind::Tool(name, _) if name.to_ascii_lowercase().contains("todo") => {}
                ActionKind::Tool(name, key) if ok => {
                    let e = tools
                        .entry((name.as_str(), key.as_deref()))
                        .or_insert(ToolRuns {
                            last: act.idx,
                            result: None,
                            calls: 0,
                        });
                    e.last = act.idx;
                    e.result = act.result.as_deref();
                    e.calls += 1;
                }
                ActionKind::Command(c) if act.outcome.is_some() => {
                    // A command that failed after its last success is not done.
                    let key = command_shape(c.trim());
                    commands.remove(&key);
                    failed_commands.insert(key);
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
        for (cmd, idx, failed_before, runs) in commands.into_values() {
            let note = match (failed_before, runs) {
                (true, _) => " (after earlier failures)",
                (false, 1) => "",
                (false, _) => " (run repeatedly)",
            };
            out.push(DoneItem {
                idx,
                text: format!("Ran {} successfully{note}", code(cmd, 160)),
            });
        }
        // The latest few tools: a long run of calls says little more.
        let mut calls: Vec<(usize, String)> = tools
            .into_iter()
            .map(|((name, key), runs)| {
                let ToolRuns {
                    last,
                    result,
                    calls: n,
                } = runs;
                let times = if n > 1 {
                    format!(" ×{n}")
                } else {
                    String::new()
                };
                let what = match (key, result) {
                    (Some(k), Some(r)) => format!(" ({}){times} → {r}", clip_head(k, 80)),
                    (Some(k), None) => format!(" ({}){times}", clip_head(k, 80)),
                    (None, Some(r)) => format!("{times} → {r}"),
                    (None, None) => times,
                };
                (last, format!("Called `{}`{what}", clip_head(name, 60)))
            })
            .collect();
        calls.sort_by_key(|(idx, _)| *idx);
        let mut per_tool: BTreeMap<String, usize> = BTreeMap::new();
        for (idx, text) in calls.into_iter().rev() {
            let name = text.split('`').nth(1).unwrap_or("").to_string();
            let n = per_tool.entry(name).or_default();
            *n += 1;
            if *n <= 4 {
                out.push(DoneItem { idx, text });
            }
        }
        if !looked.is_empty() {
            let total: usize = looked.iter().map(|(_, n)| n).sum();
            let what: Vec<String> = looked
                .iter()
                .take(6)
                .map(|(w, n)| {
                    if *n > 1 {
                        format!("{w} ×{n}")
                    } else {
                        w.clone()
                    }
                })
                .collect();
            let more = if looked.len() > 6 { ", …" } else { "" };
            out.push(DoneItem {
                idx: looked_last,
                text: format!(
                    "{EXPLORED} {total} read-only call{} ({}{more})",
                    if total == 1 { "" } else { "s" },
                    what.join(", ")
                ),
            });
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
        for fail in self.open_failures().iter().rev().take(2) {
            out.push(format!(
                "Fix the failure of {}: {}",
                fail.label,
                fail.headline_line(caps.item)
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
            // Its first line, cut at a sentence end: the goal holds the rest.
            let line = text.lines().next().unwrap_or("");
            let more = if text.lines().nth(1).is_some() {
                " …"
            } else {
                ""
            };
            let line = sentences_within(line, caps.item);
            let more = if line.ends_with('…') { "" } else { more };
            out.push(format!(
                "Make sure the latest user request is fully handled: {line}{more}"
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
                    // "Remaining:" leads into a list (a plan statement), it says nothing itself;
                    // "Now let" is no statement either.
                    && is_statement(c)
                    && !reports_done(c)
                    && !is_question(c)
                    && !DECISION_RE.is_match(c)
            })
            .collect()
    }

    /// One line per distinct command (latest 12): its outcomes in order, most recent last.
    pub(in super::super) fn command_histories(&self) -> Vec<CommandHistory> {
        // The same command with other numbers (a poll with another `sleep`) is one line: the
        // latest command, every run's outcome.
        let mut by_cmd: BTreeMap<String, CommandRuns> = BTreeMap::new();
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
            let e = by_cmd
                .entry(command_shape(c.trim()))
                .or_insert_with(|| CommandRuns {
                    outcomes: Vec::new(),
                    last_idx: act.idx,
                    latest: c.as_str(),
                    variants: BTreeSet::new(),
                });
            e.outcomes.push(outcome);
            e.last_idx = act.idx;
            e.latest = c.as_str();
            e.variants.insert(c.trim());
        }
        let mut out: Vec<CommandHistory> = by_cmd
            .into_values()
            .map(|runs| {
                let CommandRuns {
                    outcomes,
                    last_idx,
                    latest: cmd,
                    variants,
                } = runs;
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
                let label = if variants.len() > 1 {
                    format!(
                        "{} (and {} more like it)",
                        code(cmd, 160),
                        variants.len() - 1
                    )
                } else {
                    code(cmd, 160)
                };
                CommandHistory {
                    label,
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

/// The calls of one tool with one key argument: where the last was, what it returned, how many.
struct ToolRuns<'a> {
    last: usize,
    result: Option<&'a str>,
    calls: usize,
}

/// The runs of one command shape (see `noise::command_shape`): every outcome in order, the
/// latest run and its command, and the distinct commands of that shape.
struct CommandRuns<'a> {
    outcomes: Vec<String>,
    last_idx: usize,
    latest: &'a str,
    variants: BTreeSet<&'a str>,
}

/// How the one Done line about read-only exploration starts (an update replaces an earlier
/// summary's line with its own).
pub(in super::super) const EXPLORED: &str = "Explored without changing anything:";

/// What a read-only command is called in the exploration line: its first word (`git` with its
/// subcommand), from the part of a chain that is not a `cd` or a poll's `sleep`.
fn look_name(command: &str) -> String {
    let part = command_parts(command)
        .into_iter()
        .map(str::trim)
        .find(|p| !p.is_empty() && !p.starts_with("cd ") && !p.starts_with("sleep "))
        .unwrap_or(command);
    let mut words = part.split_whitespace();
    match words.next() {
        Some("git") => format!("git {}", words.find(|w| !w.starts_with('-')).unwrap_or("")),
        Some(w) => w.to_string(),
        None => String::new(),
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
