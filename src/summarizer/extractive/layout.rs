//! Pi's section layouts and the budgeted renderer: facts become prioritised items, and items are
//! admitted most-important-first until the output would exceed its budget.

use std::collections::BTreeSet;

use crate::json::utf16_len;

use super::text::code;
use super::G_NEW;

/// Pi's six-section history layout; `## Progress` carries no items of its own, so it is part
/// of the `### Done` heading block.
pub(super) const HISTORY_SECTIONS: [SectionSpec; 8] = [
    SectionSpec::new("## Goal", Marker::Bullet, 12),
    SectionSpec::new("## Constraints & Preferences", Marker::Bullet, 12),
    SectionSpec::new("## Progress\n### Done", Marker::Done, 25),
    SectionSpec::new("### In Progress", Marker::Todo, 6),
    SectionSpec::new("### Blocked", Marker::Bullet, 5),
    SectionSpec::new("## Key Decisions", Marker::Bullet, 8),
    SectionSpec::new("## Next Steps", Marker::Numbered, 9),
    SectionSpec::new("## Critical Context", Marker::Bullet, 60),
];
pub(super) const GOAL: usize = 0;
pub(super) const CONSTRAINTS: usize = 1;
pub(super) const DONE: usize = 2;
pub(super) const IN_PROGRESS: usize = 3;
pub(super) const BLOCKED: usize = 4;
pub(super) const DECISIONS: usize = 5;
pub(super) const NEXT: usize = 6;
pub(super) const CRITICAL: usize = 7;

/// Pi's turn-prefix layout (the start of an over-long turn whose suffix is kept).
pub(super) const TURN_PREFIX_SECTIONS: [SectionSpec; 3] = [
    SectionSpec::new("## Original Request", Marker::Bullet, 3),
    SectionSpec::new("## Early Progress", Marker::Bullet, 30),
    SectionSpec::new("## Context for Suffix", Marker::Bullet, 40),
];
pub(super) const ORIGINAL: usize = 0;
pub(super) const EARLY: usize = 1;
pub(super) const SUFFIX_CTX: usize = 2;

/// What an empty section says (Pi's template asks for "(none)").
pub(super) const PLACEHOLDER: &str = "(none)";

/// How many file paths share one Critical Context line.
pub(super) const PATHS_PER_LINE: usize = 4;

#[derive(Clone, Copy)]
pub(super) enum Marker {
    Bullet,
    Done,
    Todo,
    /// `N. `; sections using it hold at most 9 items so the prefix is always 3 units wide.
    Numbered,
}

impl Marker {
    pub(super) fn prefix(self) -> &'static str {
        match self {
            Marker::Bullet => "- ",
            Marker::Done => "- [x] ",
            Marker::Todo => "- [ ] ",
            Marker::Numbered => "1. ",
        }
    }
}

pub(super) struct SectionSpec {
    pub(super) heading: &'static str,
    pub(super) marker: Marker,
    pub(super) max_items: usize,
}

impl SectionSpec {
    pub(super) const fn new(heading: &'static str, marker: Marker, max_items: usize) -> Self {
        let max_items = match marker {
            Marker::Numbered if max_items > 9 => 9,
            _ => max_items,
        };
        SectionSpec {
            heading,
            marker,
            max_items,
        }
    }
}

/// One fact competing for space in the summary.
pub(super) struct Item {
    pub(super) section: usize,
    pub(super) priority: u32,
    /// Render order inside the section: (group, sequence).
    pub(super) order: (u8, u64),
    /// The text already laid out for a list item (continuation lines indented).
    pub(super) text: String,
    /// A must-keep fact (the goal, a constraint, a decision, an open error): admitted before
    /// everything else and up to the hard cap, past the size target and the section's count.
    pub(super) keep: bool,
}

/// Collects items, skipping empty texts.
pub(super) struct Items {
    pub(super) list: Vec<Item>,
}

impl Items {
    pub(super) fn new() -> Self {
        Items { list: Vec::new() }
    }

    /// Adds an item of this session's own entries, ordered by the entry index `idx`.
    pub(super) fn add_new(&mut self, section: usize, priority: u32, idx: usize, text: &str) {
        self.add(section, priority, (G_NEW, idx as u64), text);
    }

    pub(super) fn add(&mut self, section: usize, priority: u32, order: (u8, u64), text: &str) {
        self.push(section, priority, order, text, false);
    }

    /// Adds a must-keep item (see [`Item::keep`]).
    pub(super) fn keep(&mut self, section: usize, priority: u32, order: (u8, u64), text: &str) {
        self.push(section, priority, order, text, true);
    }

    /// [`Items::keep`] for an item of this session's own entries.
    pub(super) fn keep_new(&mut self, section: usize, priority: u32, idx: usize, text: &str) {
        self.keep(section, priority, (G_NEW, idx as u64), text);
    }

    fn push(&mut self, section: usize, priority: u32, order: (u8, u64), text: &str, keep: bool) {
        // No run of base64 or minified code reaches a summary, whatever the item quotes.
        let text = if super::noise::has_blob(text) {
            layout(&super::noise::deblob(text))
        } else {
            layout(text)
        };
        if text.is_empty() || is_placeholder(&text) {
            return;
        }
        self.list.push(Item {
            section,
            priority,
            order,
            text,
            keep,
        });
    }
}

/// How big a summary may get: `target` for everything, `hard` (Pi's cap) for must-keep facts.
#[derive(Clone, Copy)]
pub(super) struct Budget {
    pub(super) target: usize,
    pub(super) hard: usize,
}

impl Budget {
    /// The budget for a call capped at `max_tokens`, aiming at `target_tokens` when set (the
    /// `[summarizer] extractive_target_tokens` setting), never above [`target_units`].
    pub(super) fn new(max_tokens: u64, target_tokens: Option<u64>) -> Budget {
        let hard = budget_units(max_tokens);
        let natural = target_units(max_tokens);
        let target = match target_tokens {
            Some(t) => natural.min(budget_units(t)),
            None => natural,
        };
        Budget { target, hard }
    }
}

/// The room a summary aims for: the whole cap when it is small, else a quarter of it but at
/// least 8000 units (about 2000 tokens). Pi's cap is 0.8 × reserve, the room left for the next
/// turns; a summary that filled it would trigger the next compaction at once.
pub(super) fn target_units(max_tokens: u64) -> usize {
    let hard = budget_units(max_tokens);
    (hard / 4).max(hard.min(8_000))
}

/// `max_tokens * 4`, saturating (Pi estimates one token per four characters).
pub(super) fn budget_units(max_tokens: u64) -> usize {
    usize::try_from(max_tokens.saturating_mul(4)).unwrap_or(usize::MAX)
}

/// Per-item length caps, scaled with the budget so a small budget is not eaten by one item,
/// and never above a line a person reads (`noise::ITEM_MAX`): a longer text gives its point
/// and names the entry holding the rest.
pub(super) struct Caps {
    pub(super) goal: usize,
    pub(super) item: usize,
    pub(super) error: usize,
    /// An injected note's point: context, so shorter than a request.
    pub(super) note: usize,
}

impl Caps {
    pub(super) fn for_budget(budget: usize) -> Self {
        let max = super::noise::ITEM_MAX;
        Caps {
            goal: (budget / 4).clamp(160, max - 20),
            item: (budget / 12).clamp(120, max - 60),
            error: (budget / 8).clamp(160, max - 60),
            note: (budget / 16).clamp(100, 280),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering under a budget
// ---------------------------------------------------------------------------------------------

/// Admits items by priority until the budget is reached, then lays the sections out in Pi's
/// order: must-keep items first, up to the hard cap and past the sections' item counts (a
/// numbered section still holds at most 9), then the rest up to the target. Returns the bare
/// headings when not even the "(none)" skeleton fits.
pub(super) fn render(specs: &[SectionSpec], items: Vec<Item>, budget: Budget) -> String {
    // Highest priority first; ties keep insertion order (stable sort), so output is stable.
    let mut ranked: Vec<usize> = (0..items.len()).collect();
    ranked.sort_by(|&x, &y| {
        (items[y].keep, items[y].priority).cmp(&(items[x].keep, items[x].priority))
    });

    let mut counts = vec![0usize; specs.len()];
    let mut sums = vec![0usize; specs.len()];
    let mut seen: BTreeSet<(usize, String)> = BTreeSet::new();
    let mut chosen: Vec<usize> = Vec::new();
    let mut total = layout_len(specs, &counts, &sums);

    if total > budget.hard {
        return specs
            .iter()
            .map(|s| s.heading)
            .collect::<Vec<_>>()
            .join("\n\n");
    }

    for i in ranked {
        let item = &items[i];
        let Some(spec) = specs.get(item.section) else {
            continue;
        };
        let s = item.section;
        let numbered_full = matches!(spec.marker, Marker::Numbered) && counts[s] >= 9;
        let over_count = counts[s] >= spec.max_items && (!item.keep || numbered_full);
        if over_count || !seen.insert((s, dedup_key(&item.text))) {
            continue;
        }
        let line = utf16_len(spec.marker.prefix()) + utf16_len(&item.text);
        counts[s] += 1;
        sums[s] += line;
        let next = layout_len(specs, &counts, &sums);
        let room = if item.keep {
            budget.hard
        } else {
            budget.target
        };
        if next <= room {
            total = next;
            chosen.push(i);
        } else {
            counts[s] -= 1;
            sums[s] -= line;
        }
    }

    chosen.sort_by(|&x, &y| {
        (items[x].section, items[x].order, x).cmp(&(items[y].section, items[y].order, y))
    });
    let mut out = String::with_capacity(total);
    for (s, spec) in specs.iter().enumerate() {
        if s > 0 {
            out.push_str("\n\n");
        }
        out.push_str(spec.heading);
        out.push('\n');
        let mut n = 0usize;
        for &i in chosen.iter().filter(|&&i| items[i].section == s) {
            if n > 0 {
                out.push('\n');
            }
            n += 1;
            match spec.marker {
                Marker::Numbered => out.push_str(&format!("{n}. ")),
                m => out.push_str(m.prefix()),
            }
            out.push_str(&items[i].text);
        }
        if n == 0 {
            out.push_str(PLACEHOLDER);
        }
    }
    debug_assert_eq!(utf16_len(&out), total);
    out
}

/// The exact UTF-16 length of the rendered output for the given per-section item counts and
/// summed line lengths.
pub(super) fn layout_len(specs: &[SectionSpec], counts: &[usize], sums: &[usize]) -> usize {
    let mut total = 2 * specs.len().saturating_sub(1);
    for (s, spec) in specs.iter().enumerate() {
        total += utf16_len(spec.heading) + 1;
        total += match counts[s] {
            0 => PLACEHOLDER.len(),
            c => sums[s] + (c - 1),
        };
    }
    total
}

/// Two items are duplicates when they read the same ignoring a leading "(latest)"/"(earlier)"
/// label, case, spacing and final punctuation, so a merged summary does not repeat what this
/// span re-derived.
pub(super) fn dedup_key(text: &str) -> String {
    let t = strip_labels(text).trim_end_matches(['.', ';', ':', ' ', '…']);
    t.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

pub(super) fn strip_labels(mut text: &str) -> &str {
    loop {
        let before = text;
        for label in ["(latest) ", "(earlier) ", "(original request) "] {
            if let Some(rest) = text.strip_prefix(label) {
                text = rest;
            }
        }
        if text.len() == before.len() {
            return text;
        }
    }
}

/// Lays text out as one list item: CRLF normalized, trailing spaces and blank lines dropped,
/// continuation lines indented two spaces so no content line can look like a heading.
pub(super) fn layout(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.trim_end_matches(['\r', ' ', '\t']);
        if line.trim().is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push_str(line.trim_start());
        } else {
            out.push_str("\n  ");
            out.push_str(line.trim_start());
        }
    }
    out
}

pub(super) fn is_placeholder(text: &str) -> bool {
    let t = text.trim().trim_end_matches('.');
    t.eq_ignore_ascii_case("(none)") || t.eq_ignore_ascii_case("none")
}

/// Adds sorted file paths a few per line, so a long list costs few lines and drops from its
/// end first.
pub(super) fn add_file_lines(
    items: &mut Items,
    section: usize,
    label: &str,
    paths: &[String],
    base: u32,
) {
    let paths: Vec<&str> = paths
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect();
    let seq_base: u64 = if label == "Modified" { 1_000 } else { 2_000 };
    for (n, chunk) in paths.chunks(PATHS_PER_LINE).enumerate() {
        let list: Vec<String> = chunk.iter().map(|p| code(p, 300)).collect();
        let text = format!("{label}: {}", list.join(", "));
        let priority = base.saturating_sub(n.min(999) as u32);
        items.add(section, priority, (G_NEW, seq_base + n as u64), &text);
    }
}
