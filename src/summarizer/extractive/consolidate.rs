//! Consolidation: what keeps a summary flat over many compactions. Each update carries the last
//! summary forward, so without this every successful command, every per-task request and every
//! done item of every earlier span would stay, and the summary would grow with each compaction.
//!
//! Items of one family (successful commands, file changes, tool calls, reported work, earlier
//! requests, command histories, resolved errors, stale in-progress and next-step notes) are
//! first deduplicated by what they are about (the newest wins), then the newest few are kept
//! verbatim and the older ones an earlier summary carried fold into one line with a count and a
//! range (a span's own items never fold: a first compaction keeps them all):
//! `Earlier successful commands (7): `cargo build` … `cargo test range``. A folded line read
//! back from an earlier summary folds again, its count added, so one line stands for all of
//! them however many compactions there were. Must-keep items (the goal, constraints, decisions,
//! open errors) belong to no family and are never folded.

use std::collections::BTreeMap;

use super::layout::*;

/// A kind of item a long session repeats.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Family {
    Commands,
    Files,
    Tools,
    Reported,
    Requests,
    CommandLines,
    Resolved,
    EarlierProgress,
    EarlierNext,
}

impl Family {
    /// The label of the folded line, how many items stay verbatim, and the section.
    fn spec(self) -> (&'static str, usize, usize) {
        match self {
            Family::Commands => ("Earlier successful commands", 3, DONE),
            Family::Files => ("Earlier file changes", 3, DONE),
            Family::Tools => ("Earlier tool calls", 3, DONE),
            Family::Reported => ("Earlier work done", 3, DONE),
            Family::Requests => ("Earlier requests", 1, GOAL),
            Family::CommandLines => ("Earlier commands", 4, CRITICAL),
            Family::Resolved => ("Earlier errors since resolved", 1, CRITICAL),
            Family::EarlierProgress => ("Earlier in-progress notes", 1, IN_PROGRESS),
            Family::EarlierNext => ("Earlier next steps", 2, NEXT),
        }
    }

    const ALL: [Family; 9] = [
        Family::Commands,
        Family::Files,
        Family::Tools,
        Family::Reported,
        Family::Requests,
        Family::CommandLines,
        Family::Resolved,
        Family::EarlierProgress,
        Family::EarlierNext,
    ];
}

/// An item's family, what it is about (items about the same thing are duplicates), and how it
/// reads inside a folded line's range. A folded line is recognised by its label.
fn family_of(section: usize, text: &str) -> Option<(Family, String, String)> {
    let first_code = || {
        text.split('`')
            .nth(1)
            .filter(|c| !c.trim().is_empty())
            .map(|c| format!("`{c}`"))
    };
    let quoted = || format!("\"{}\"", short(text, 60));
    for f in Family::ALL {
        let (label, _, sec) = f.spec();
        if sec == section && text.starts_with(label) && text[label.len()..].starts_with(" (") {
            return Some((f, text.to_string(), text.to_string()));
        }
    }
    let family = match section {
        DONE if text.starts_with("Ran `") => Family::Commands,
        DONE if ["Edited `", "Wrote `", "Wrote and edited `"]
            .iter()
            .any(|p| text.starts_with(p)) =>
        {
            Family::Files
        }
        DONE if text.starts_with("Called `") => Family::Tools,
        DONE => Family::Reported,
        GOAL => Family::Requests,
        CRITICAL if text.starts_with("Command `") => Family::CommandLines,
        CRITICAL
            if text.starts_with("Settled since the earlier summary:")
                || text.starts_with("Earlier error (fixed since)")
                || (text.starts_with("Earlier error from ")
                    || text.starts_with("Last error from "))
                    && super::is_resolved_error(text) =>
        {
            Family::Resolved
        }
        IN_PROGRESS if text.starts_with("(earlier) ") => Family::EarlierProgress,
        NEXT if text.starts_with("(earlier) ") => Family::EarlierNext,
        _ => return None,
    };
    let (key, range) = match family {
        // The same command with other numbers (a poll with another `sleep`) is the same item.
        Family::Commands | Family::CommandLines => {
            let code = first_code().unwrap_or_else(quoted);
            (
                super::noise::command_shape(&code.trim_matches('`').to_lowercase()),
                code,
            )
        }
        Family::Files | Family::Resolved => {
            let code = first_code().unwrap_or_else(quoted);
            (code.to_lowercase(), code)
        }
        Family::Tools => {
            let code = first_code().unwrap_or_else(quoted);
            (dedup_key(text), code)
        }
        _ => (dedup_key(text), quoted()),
    };
    Some((family, key, range))
}

/// A folded line read back: its count and the two ends of its range.
fn parse_folded(label: &str, text: &str) -> Option<(usize, String, String)> {
    let rest = text.strip_prefix(label)?.strip_prefix(" (")?;
    let (n, range) = rest.split_once("): ")?;
    let n: usize = n.trim().parse().ok()?;
    let (first, last) = match range.split_once(" … ") {
        Some((a, b)) => (a.to_string(), b.to_string()),
        None => (range.to_string(), range.to_string()),
    };
    Some((n, first, last))
}

/// At most `cap` characters of the first line, at a word boundary, with `…` when cut. Never
/// contains the range separator ` … `.
fn short(text: &str, cap: usize) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    let line = super::layout::strip_labels(line.strip_prefix("(earlier) ").unwrap_or(line));
    let mut out: String = line.chars().take(cap).collect();
    if out.chars().count() < line.chars().count() {
        if let Some(ws) = out.rfind(' ') {
            if ws > cap / 2 {
                out.truncate(ws);
            }
        }
        out = format!("{}…", out.trim_end());
    }
    out.replace(" … ", " ... ").replace('"', "'")
}

/// Folds the families of `items` in place (see the module docs).
pub(super) fn consolidate(items: &mut Items) {
    let list = std::mem::take(&mut items.list);
    // (family) → indices of its members, in render order.
    let mut members: BTreeMap<Family, Vec<usize>> = BTreeMap::new();
    let mut info: Vec<Option<(Family, String, String)>> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let f = if item.keep {
            None
        } else {
            family_of(item.section, &item.text)
        };
        if let Some((family, ..)) = &f {
            members.entry(*family).or_default().push(i);
        }
        info.push(f);
    }
    let mut drop = vec![false; list.len()];
    let mut folded: Vec<Item> = Vec::new();
    for (family, mut idxs) in members {
        let (label, keep_newest, section) = family.spec();
        idxs.sort_by_key(|&i| (list[i].order, i));
        // The newest item about each thing stands for it.
        let mut newest: BTreeMap<&str, usize> = BTreeMap::new();
        for &i in &idxs {
            let key = info[i].as_ref().map_or("", |f| f.1.as_str());
            if let Some(old) = newest.insert(key, i) {
                drop[old] = true;
            }
        }
        let live: Vec<usize> = idxs.into_iter().filter(|&i| !drop[i]).collect();
        // Only what earlier summaries carried folds: a span's own items stay verbatim (the
        // budget and the section's count bound them), so one compaction loses nothing here.
        let (older, _recent) = live.split_at(live.len().saturating_sub(keep_newest));
        let old: Vec<usize> = older
            .iter()
            .copied()
            .filter(|&i| list[i].order.0 != super::G_NEW)
            .collect();
        let old = old.as_slice();
        // One item folds only when the folded line is shorter (a long error text).
        let worth = match old {
            [] => false,
            [one] => {
                parse_folded(label, &list[*one].text).is_none()
                    && info[*one]
                        .as_ref()
                        .is_some_and(|f| list[*one].text.len() > label.len() + f.2.len() + 8)
            }
            _ => true,
        };
        if !worth {
            continue;
        }
        let mut count = 0usize;
        let mut first: Option<String> = None;
        let mut last = String::new();
        for &i in old {
            let text = &list[i].text;
            match parse_folded(label, text) {
                Some((n, a, b)) => {
                    count += n;
                    first.get_or_insert(a);
                    last = b;
                }
                None => {
                    count += 1;
                    let range = info[i].as_ref().map_or(String::new(), |f| f.2.clone());
                    first.get_or_insert_with(|| range.clone());
                    last = range;
                }
            }
            drop[i] = true;
        }
        let first = first.unwrap_or_default();
        let range = if first == last {
            first
        } else {
            format!("{first} … {last}")
        };
        let priority = old.iter().map(|&i| list[i].priority).min().unwrap_or(0);
        let order = old.iter().map(|&i| list[i].order).min().unwrap_or((0, 0));
        folded.push(Item {
            section,
            priority,
            order,
            text: format!("{label} ({count}): {range}"),
            keep: false,
        });
    }
    items.list = list
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|(i, _)| i)
        .chain(folded)
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Done item an earlier summary carried (`G_PREVIOUS`).
    fn done(items: &mut Items, seq: u64, text: &str) {
        items.add(
            DONE,
            40_000 + seq as u32,
            (super::super::G_PREVIOUS, seq),
            text,
        );
    }

    #[test]
    fn repeated_items_fold_into_one_line_with_a_count_and_a_range() {
        let mut items = Items::new();
        for (k, cmd) in [
            "cargo build",
            "cargo test a",
            "cargo test b",
            "cargo test c",
            "cargo test d",
            "cargo test e",
            "cargo test f",
        ]
        .iter()
        .enumerate()
        {
            done(&mut items, k as u64, &format!("Ran `{cmd}` successfully"));
        }
        // The same command again: one line about it, the newest.
        done(
            &mut items,
            9,
            "Ran `cargo test f` successfully (after earlier failures)",
        );
        consolidate(&mut items);
        let texts: Vec<&str> = items.list.iter().map(|i| i.text.as_str()).collect();
        assert!(
            texts.contains(&"Earlier successful commands (4): `cargo build` … `cargo test c`"),
            "{texts:?}"
        );
        assert_eq!(
            texts.iter().filter(|t| t.contains("cargo test f")).count(),
            1,
            "{texts:?}"
        );
        assert_eq!(texts.len(), 4, "{texts:?}");

        // Read back and folded again: the counts add up and the range keeps its first end.
        let mut again = Items::new();
        done(
            &mut again,
            0,
            "Earlier successful commands (3): `cargo build` … `cargo test b`",
        );
        for (k, cmd) in [
            "cargo test c",
            "cargo test d",
            "cargo test e",
            "cargo test f",
            "npm run lint",
        ]
        .iter()
        .enumerate()
        {
            done(
                &mut again,
                k as u64 + 1,
                &format!("Ran `{cmd}` successfully"),
            );
        }
        consolidate(&mut again);
        let texts: Vec<&str> = again.list.iter().map(|i| i.text.as_str()).collect();
        assert!(
            texts.contains(&"Earlier successful commands (5): `cargo build` … `cargo test d`"),
            "{texts:?}"
        );
        assert_eq!(texts.len(), 4, "{texts:?}");
    }

    #[test]
    fn a_spans_own_items_never_fold() {
        let mut items = Items::new();
        for k in 0..10u64 {
            items.add(
                DONE,
                40_000,
                (super::super::G_NEW, k),
                &format!("Ran `cargo test t{k}` successfully"),
            );
        }
        consolidate(&mut items);
        assert_eq!(items.list.len(), 10);
    }

    #[test]
    fn must_keep_items_never_fold() {
        let mut items = Items::new();
        for k in 0..10u64 {
            items.keep(
                GOAL,
                90_000,
                (1, k),
                &format!("Request number {k} with its own words"),
            );
        }
        consolidate(&mut items);
        assert_eq!(items.list.len(), 10);
    }
}
