//! Text helpers shared by the extractive summarizer: clipping without cutting words, sentence
//! splitting, inline code, and the patterns that classify sentences.

use std::sync::LazyLock;

use regex::Regex;

use crate::json::{utf16_len, utf16_prefix};


/// Keeps the first `cap` UTF-16 units and says how much was cut.
pub(super) fn clip_head(s: &str, cap: usize) -> String {
    let len = utf16_len(s);
    if len <= cap {
        return s.to_string();
    }
    let head = utf16_prefix(s, cap).trim_end();
    format!("{head} […{} more chars]", len - utf16_len(head))
}

/// Keeps the last `cap` UTF-16 units (conclusions sit at the end of a message).
pub(super) fn clip_tail(s: &str, cap: usize) -> String {
    let len = utf16_len(s);
    if len <= cap {
        return s.to_string();
    }
    let mut units = 0usize;
    let mut start = s.len();
    for (i, ch) in s.char_indices().rev() {
        let w = ch.len_utf16();
        if units + w > cap {
            break;
        }
        units += w;
        start = i;
    }
    let tail = s.get(start..).unwrap_or("").trim_start();
    format!("[…{} earlier chars] {tail}", len - utf16_len(tail))
}

/// The first non-blank line, clipped; what a one-line error report needs.
pub(super) fn first_line(s: &str, cap: usize) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let more = s.lines().filter(|l| !l.trim().is_empty()).count() > 1;
    let clipped = clip_head(line, cap);
    if more && utf16_len(line) <= cap {
        format!("{clipped} …")
    } else {
        clipped
    }
}

/// A command or path as inline code on one line.
pub(super) fn code(s: &str, cap: usize) -> String {
    let mut lines = s.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let mut text = clip_head(first, cap);
    if lines.next().is_some() {
        text.push_str(" …");
    }
    format!("`{}`", text.replace('`', "'"))
}

/// Splits prose into sentences: line breaks and `.`/`!`/`?`/`;` followed by whitespace end a
/// sentence; fenced code blocks are skipped (they are not statements of intent).
pub(super) fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut current = String::new();
        let mut chars = trimmed.chars().peekable();
        while let Some(ch) = chars.next() {
            current.push(ch);
            let ends = matches!(ch, '.' | '!' | '?' | ';')
                && chars.peek().is_none_or(|c| c.is_whitespace());
            if ends {
                push_sentence(&mut out, &current);
                current.clear();
            }
        }
        push_sentence(&mut out, &current);
    }
    out
}

pub(super) fn push_sentence(out: &mut Vec<String>, s: &str) {
    let s = s.trim().trim_start_matches(['-', '*', '>', ' ']).trim();
    if s.chars().count() >= 4 {
        out.push(s.to_string());
    }
}

/// User sentences that state a rule or preference.
pub(super) static CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(must|mustn't|must not|should|shouldn't|should not|don't|do not|doesn't|never|always|prefer\w*|avoid\w*|only|without|make sure|ensure|required|mandatory|not allowed|forbidden|at most|at least|no more than)\b",
    )
    .expect("constraint pattern is valid")
});

/// Assistant sentences that announce a choice.
pub(super) static DECISION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(i'll use|i will use|we'll use|we will use|let's use|let's go with|going with|go with|decided|decide to|decision|chose|chosen|choose to|opted|opt for|instead of|rather than|switch(ed|ing)? to|the approach|approach is|the plan is|will use|better to)\b",
    )
    .expect("decision pattern is valid")
});

/// Assistant sentences that announce what comes next.
pub(super) static NEXT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(next|then i'll|then we|remaining|todo|still need|needs? to|will now|i'll|i will|let me|going to|afterwards|follow[- ]up)\b",
    )
    .expect("next-step pattern is valid")
});

/// Pulls `exited with code N` out of a bash tool result (Pi's wording, sessions.md §9.4).
pub(super) static EXIT_CODE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)exit(?:ed)? with (?:code|status) (-?\d+)").expect("exit pattern is valid")
});

/// A leading list marker in a previous summary (`- `, `* `, `1. `, `- [x] `).
pub(super) static BULLET_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,3}[.)]\s+)").expect("bullet pattern is valid")
});
