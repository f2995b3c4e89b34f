//! Scoring a summary against what its handoff owes: which obligations it carries, per kind and
//! overall, and which it misses. Any summary is scored the same way (an LLM's, a hook's, the
//! extractive summarizer's, a speculation's), from its text alone.
//!
//! The text is read once: whitespace collapsed (for exact needles) and the content words of
//! each item as a set (for sentences, which must be said in one item), so a check is linear in
//! the summary times the obligations, whatever span they came from.

use std::collections::{BTreeMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::words::stem_set;
use super::{Kind, Mode, Needle, Obligation};

/// One kind's share of a check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "HandoffKindScore")]
pub struct KindScore {
    pub owed: usize,
    pub carried: usize,
    /// `carried / owed`, to three decimals.
    pub score: f64,
}

/// One obligation as the protocol states it (what a summary missed, what a preview owes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "HandoffItem")]
pub struct Item {
    pub kind: Kind,
    /// What is owed, on one line.
    pub text: String,
    /// The entry it came from (`getEntry` returns it whole).
    pub entry_id: Option<String>,
}

impl From<&Obligation> for Item {
    fn from(o: &Obligation) -> Item {
        Item {
            kind: o.kind,
            text: o.text.clone(),
            entry_id: o.entry_id.clone(),
        }
    }
}

/// A summary's handoff check, as `compact`, `compaction_end`, `session_compact` and the cost
/// report carry it (`handoff`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "HandoffReport")]
pub struct Report {
    /// The share of the obligations the summary carried as its summarizer (or hook) wrote it,
    /// before any repair; 1 when nothing was owed. Three decimals.
    pub score: f64,
    /// Per kind with something owed (`request`, `constraint`, `openTask`, `failure`, `file`,
    /// `identifier`, `command`).
    pub by_kind: BTreeMap<String, KindScore>,
    /// What the summary did not carry, in the order owed.
    pub missing: Vec<Item>,
    /// `compaction.handoff` when the summary was checked.
    pub mode: Mode,
    /// With `retry`: the score before the extra call (present only when one was made; `score`
    /// and `missing` are then the retried summary's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_score: Option<f64>,
    /// How many missing obligations the repair section appended (0 in `report` mode).
    pub repaired: usize,
}

impl Report {
    /// How many obligations the summary owed.
    pub fn owed(&self) -> usize {
        self.by_kind.values().map(|k| k.owed).sum()
    }
}

/// Three decimals: enough to rank, and stable on the wire.
fn rounded(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A summary as the check reads it.
struct Said {
    /// The text with whitespace runs as one space.
    flat: String,
    /// The content words of each item: a line with the lines indented under it.
    items: Vec<HashSet<String>>,
}

impl Said {
    fn of(summary: &str) -> Said {
        let mut items: Vec<String> = Vec::new();
        for line in summary.lines() {
            if line.trim().is_empty() {
                continue;
            }
            match items.last_mut() {
                Some(item) if line.starts_with([' ', '\t']) => {
                    item.push('\n');
                    item.push_str(line);
                }
                _ => items.push(line.to_owned()),
            }
        }
        Said {
            flat: collapse(summary),
            items: items.iter().map(|i| stem_set(i)).collect(),
        }
    }

    /// An exact needle anywhere; a sentence's words within one item (a bullet, a paragraph
    /// line): its words scattered over the summary do not say it.
    fn holds(&self, needle: &Needle) -> bool {
        match needle {
            Needle::Exact(text) => contains_exactly(&self.flat, &collapse(text)),
            Needle::Words { stems, need } => self
                .items
                .iter()
                .any(|item| stems.iter().filter(|s| item.contains(*s)).count() >= *need),
        }
    }
}

/// Whitespace runs as one space, trimmed.
fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `needle` occurs in `hay` as a whole: where it starts or ends with a word character,
/// the text next to it is no word character (`8080` is not in `18080`), and a dot or slash
/// after it does not continue it (`1.2` is not in `1.2.3`, `src/a` is not in `src/a/b.rs`).
pub(super) fn contains_exactly(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let starts_word = needle.chars().next().is_some_and(word_char);
    let ends_word = needle.chars().last().is_some_and(word_char);
    hay.match_indices(needle).any(|(at, _)| {
        let before = hay[..at].chars().next_back();
        let rest = &hay[at + needle.len()..];
        let mut after = rest.chars();
        let next = after.next();
        let then = after.next();
        let clear_before = !(starts_word && before.is_some_and(word_char));
        let clear_after = !(ends_word
            && (next.is_some_and(word_char)
                || (matches!(next, Some('.' | '/' | '-')) && then.is_some_and(word_char))));
        clear_before && clear_after
    })
}

/// Checks `summary` against `owed` (see the module doc). `mode` is recorded in the report; a
/// repair and a retry fill in `repaired` and `first_score` afterwards.
pub fn check(summary: &str, owed: &[Obligation], mode: Mode) -> Report {
    let said = Said::of(summary);
    let mut by_kind: BTreeMap<Kind, (usize, usize)> = BTreeMap::new();
    let mut missing = Vec::new();
    for o in owed {
        let carried = o.needles.iter().all(|n| said.holds(n));
        let entry = by_kind.entry(o.kind).or_default();
        entry.0 += 1;
        if carried {
            entry.1 += 1;
        } else {
            missing.push(Item::from(o));
        }
    }
    let total = owed.len();
    let carried = total - missing.len();
    Report {
        score: if total == 0 {
            1.0
        } else {
            rounded(carried as f64 / total as f64)
        },
        by_kind: by_kind
            .into_iter()
            .map(|(k, (owed, carried))| {
                let score = rounded(carried as f64 / owed as f64);
                (
                    k.as_str().to_owned(),
                    KindScore {
                        owed,
                        carried,
                        score,
                    },
                )
            })
            .collect(),
        missing,
        mode,
        first_score: None,
        repaired: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::words::stems;

    fn exact(kind: Kind, s: &str) -> Obligation {
        Obligation {
            kind,
            text: s.to_owned(),
            entry_id: Some("e1".into()),
            needles: vec![Needle::Exact(s.to_owned())],
        }
    }

    fn sentence(kind: Kind, s: &str) -> Obligation {
        let st = stems(s);
        let need = (st.len() * 3).div_ceil(5);
        Obligation {
            kind,
            text: s.to_owned(),
            entry_id: Some("e2".into()),
            needles: vec![Needle::Words { stems: st, need }],
        }
    }

    #[test]
    fn identifiers_count_only_whole_and_sentences_by_their_words() {
        assert!(contains_exactly("listen on localhost:8080 now", "8080"));
        assert!(!contains_exactly("listen on 18080", "8080"));
        assert!(!contains_exactly("version 1.2.3", "1.2"));
        assert!(contains_exactly("version 1.2.", "1.2"));
        assert!(!contains_exactly("see src/a/b.rs", "src/a"));
        assert!(contains_exactly(
            "ran `cargo test --all`",
            "cargo test --all"
        ));
        assert!(contains_exactly("set $DATABASE_URL first", "DATABASE_URL"));
        let owed = vec![
            exact(Kind::Identifier, "8080"),
            exact(Kind::File, "src/report.rs"),
            sentence(
                Kind::Constraint,
                "Never commit directly to the main branch.",
            ),
        ];
        let r = check(
            "## Constraints\n- Do not commit to main branch directly\n\nPort 8080.",
            &owed,
            Mode::Report,
        );
        assert_eq!(r.score, 0.667);
        assert_eq!(r.missing.len(), 1);
        assert_eq!(r.missing[0].text, "src/report.rs");
        assert_eq!(r.missing[0].entry_id.as_deref(), Some("e1"));
        assert_eq!(r.by_kind["file"].owed, 1);
        assert_eq!(r.by_kind["file"].carried, 0);
        assert_eq!(r.by_kind["identifier"].score, 1.0);
        // A summary saying nothing of it misses the rule too; nothing owed scores 1.
        let r = check("Port 8080 and src/report.rs.", &owed, Mode::Report);
        assert_eq!(r.missing.len(), 1);
        assert_eq!(r.missing[0].kind, Kind::Constraint);
        assert_eq!(check("anything", &[], Mode::Report).score, 1.0);
    }
}
