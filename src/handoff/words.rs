//! Content words: what a sentence is about, as crude stems, so that two wordings of one
//! statement meet ("profiling" meets "profile", "replaced" meets "replace"). The extractive
//! summarizer compares items with them (plan steps, carried items), and the handoff check
//! decides with them whether a summary says a sentence it owes.

use std::collections::HashSet;

/// Words that say nothing about which step or item a sentence is about.
const STOP_WORDS: [&str; 58] = [
    "the",
    "and",
    "for",
    "with",
    "into",
    "from",
    "that",
    "this",
    "then",
    "than",
    "also",
    "each",
    "only",
    "when",
    "all",
    "any",
    "are",
    "was",
    "were",
    "is",
    "its",
    "it's",
    "our",
    "your",
    "their",
    "now",
    "not",
    "but",
    "too",
    "has",
    "have",
    "had",
    "been",
    "being",
    "done",
    "finished",
    "complete",
    "completed",
    "works",
    "working",
    "passes",
    "pass",
    "green",
    "ready",
    "step",
    "steps",
    "there",
    "here",
    "what",
    "which",
    "will",
    "can",
    "out",
    "via",
    "per",
    "one",
    "two",
    "so",
];

/// Calls `f` with each content word of `text`, in order, repeats included: paths and dotted
/// names whole, other words as their first five letters; short words, stop words and bare
/// numbers are no content.
fn each_stem(text: &str, mut f: impl FnMut(String)) {
    for raw in text.split(|c: char| {
        c.is_whitespace() || matches!(c, ',' | ';' | ':' | '(' | ')' | '`' | '"' | '\'' | '*')
    }) {
        let w = raw
            .trim_matches(|c: char| !c.is_alphanumeric() && c != '/' && c != '_')
            .to_lowercase();
        if w.contains('/') || w.contains('.') && w.len() > 3 {
            f(w);
            continue;
        }
        for part in w.split(|c: char| !c.is_alphanumeric() && c != '_') {
            if part.chars().count() < 3
                || STOP_WORDS.contains(&part)
                || part.chars().all(|c| c.is_ascii_digit())
            {
                continue;
            }
            f(part.chars().take(5).collect());
        }
    }
}

/// The content words of a text as crude stems (the first five letters), each once, in order
/// of first appearance. Paths and identifiers stay whole.
pub fn stems(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    each_stem(text, |s| {
        if !out.contains(&s) {
            out.push(s);
        }
    });
    out
}

/// The content words of a (long) text as a set: what a summary says, for looking many
/// sentences up in it.
pub fn stem_set(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    each_stem(text, |s| {
        out.insert(s);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_meet_across_wordings_and_keep_paths_whole() {
        assert_eq!(
            stems("Profiling the parser in src/parse.rs, then profile it again"),
            vec!["profi", "parse", "src/parse.rs", "again"]
        );
        let set = stem_set("We replaced the parser; profiled it.");
        assert!(stems("Replace the parser").iter().all(|s| set.contains(s)));
        assert!(stems("the 42 and it").is_empty());
    }
}
