//! Text helpers shared by the extractive summarizer: clipping without cutting words, sentence
//! splitting, inline code, and the patterns that classify sentences.

use std::sync::LazyLock;

use regex::Regex;

use crate::json::{utf16_len, utf16_prefix};

/// Keeps at most the first `cap` UTF-16 units, ending at a word boundary, and says how much
/// was cut. A cut word reads as a different word to the model resuming the work, so the clip
/// backs off to the last whitespace unless that would lose more than half of the room (one
/// giant token such as a hash has no boundary to back off to).
pub(super) fn clip_head(s: &str, cap: usize) -> String {
    let len = utf16_len(s);
    if len <= cap {
        return s.to_string();
    }
    let mut head = utf16_prefix(s, cap);
    let next = s[head.len()..].chars().next();
    let inside_word = next.is_some_and(|c| !c.is_whitespace())
        && head.chars().last().is_some_and(|c| !c.is_whitespace());
    if inside_word {
        if let Some(ws) = head.rfind(char::is_whitespace) {
            if utf16_len(&head[..ws]) * 2 >= cap {
                head = &head[..ws];
            }
        }
    }
    let head = head.trim_end();
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
    let mut tail = s.get(start..).unwrap_or("");
    // Start at a word boundary (see `clip_head`).
    let cut_word = s[..start]
        .chars()
        .last()
        .is_some_and(|c| !c.is_whitespace())
        && tail.chars().next().is_some_and(|c| !c.is_whitespace());
    if cut_word {
        if let Some(ws) = tail.find(char::is_whitespace) {
            if utf16_len(&tail[ws..]) * 2 >= cap {
                tail = &tail[ws..];
            }
        }
    }
    let tail = tail.trim_start();
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

/// Assistant sentences that announce a choice, including giving an approach up (a few common
/// non-English forms too, since sessions are not all in English).
pub(super) static DECISION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(i'll use|i will use|we'll use|we will use|let's use|let's go with|going with|go with|decided|decide to|decision|chose|chosen|choose to|opted|opt for|instead of|instead|rather than|switch(ed|ing)? to|the approach|approach is|the plan is|will use|better to|statt|anstatt|stattdessen|entschieden|plutôt que|au lieu de|en lugar de|en vez de|invece di)\b",
    )
    .expect("decision pattern is valid")
});

/// Sentences that give an approach up; they are decisions, and they close the failure that
/// prompted them.
pub(super) static ABANDON_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(abandon\w*|giv(?:e|ing) up on|gave up on|won't work|will not work|doesn't work|does not work|not going to work|drop(?:ping|ped)? (?:the |this )?(?:approach|idea|plan)|no longer (?:use|pursue|try)|revert(?:ing|ed)? (?:the|this|that) (?:change|approach)|aufgeben|abandonne\w*)\b",
    )
    .expect("abandon pattern is valid")
});

/// Sentences that report a failure as fixed.
pub(super) static FIXED_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(fixed|resolved|works now|now works|now pass(?:es)?|pass(?:es)? now|(?:is|are) (?:now )?green|now green|compiles now|now compiles|builds now|now builds|succeeds now|now succeeds|no longer fails|is gone|behoben|corrigé)\b",
    )
    .expect("fixed pattern is valid")
});

/// A negation or a "still": "not fixed", "still fails" do not close anything.
pub(super) static NEGATION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(\bnot\b|n't\b|\bstill\b|\bremains?\b|\bnever\b|\bnoch\b|\bpas\b)")
        .expect("negation pattern is valid")
});

/// Compiler and linter codes (`E0599`, `TS2322`): a message naming one refers to that error.
pub(super) static ERROR_CODE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:[A-Z]{1,4}\d{3,5})\b").expect("error code pattern is valid")
});

/// Whether a user message is an acknowledgement or a greeting rather than a request: at most
/// five words, all from a small multilingual vocabulary ("ok", "yes please", "go ahead").
pub(super) fn is_acknowledgement(text: &str) -> bool {
    const ACKS: [&str; 56] = [
        "ok", "oke", "okay", "k", "kk", "yes", "yep", "yeah", "sure", "thanks", "thank", "you",
        "thx", "ty", "great", "good", "nice", "cool", "perfect", "continue", "go", "ahead", "on",
        "proceed", "do", "it", "please", "pls", "sounds", "lgtm", "fine", "alright", "all",
        "right", "hi", "hello", "hey", "there", "that", "works", "ship", "ja", "bitte", "danke",
        "weiter", "super", "oui", "merci", "vas-y", "si", "vale", "gracias", "sí", "very",
        "awesome", "agreed",
    ];
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    words.len() <= 5 && words.iter().all(|w| ACKS.contains(&w.as_str()))
}

/// Read-only exploration (`ls`, `find`, `cat`, `grep`…, no redirect): not progress.
pub(super) fn is_exploration(command: &str) -> bool {
    const LOOK: [&str; 18] = [
        "ls", "ll", "find", "cat", "head", "tail", "grep", "rg", "ag", "fd", "tree", "pwd", "wc",
        "which", "echo", "stat", "file", "du",
    ];
    // A redirect writes a file (`cat > notes.md`, `echo x >> .env`): that is work.
    if command.contains('>') {
        return false;
    }
    let mut any = false;
    for part in command.split(['|', ';', '&']) {
        let Some(word) = part.split_whitespace().next() else {
            continue;
        };
        any = true;
        if !LOOK.contains(&word) {
            return false;
        }
    }
    any
}

/// Assistant sentences that announce what comes next.
pub(super) static NEXT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(next|then i'll|then we|remaining|todo|still need|needs? to|will now|i'll|i will|let me|going to|afterwards|follow[- ]up)\b",
    )
    .expect("next-step pattern is valid")
});

/// Pulls `exited with code N` out of a bash tool result (Pi's wording, sessions.md §9.4), and
/// the `exit code: N` other harnesses print.
pub(super) static EXIT_CODE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)exit(?:ed)?(?: with)? (?:code|status):? (-?\d+)")
        .expect("exit pattern is valid")
});

/// A leading list marker in a previous summary (`- `, `* `, `1. `, `- [x] `).
pub(super) static BULLET_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,3}[.)]\s+)").expect("bullet pattern is valid")
});
