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

/// Keeps the first `head` and the last `tail` UTF-16 units of a long text (each at a word
/// boundary, the cut marked): a failure says what went wrong at its start (a compiler's first
/// error) or at its end (a traceback's last line), and neither may be lost.
pub(super) fn clip_ends(s: &str, head: usize, tail: usize) -> String {
    if utf16_len(s) <= head + tail {
        return s.to_string();
    }
    let start = clip_head(s, head);
    let start = start.rsplit_once(" […").map_or(start.as_str(), |(h, _)| h);
    let end = clip_tail(s, tail);
    let end = end.split_once("] ").map_or(end.as_str(), |(_, t)| t);
    let cut = utf16_len(s).saturating_sub(utf16_len(start) + utf16_len(end));
    format!("{start}\n[…{cut} chars…]\n{end}")
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

/// The lines of `text` outside fenced code blocks, the fences left out too: what a block holds
/// is code or output, not what someone said.
pub(crate) fn lines_outside_fences(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    text.lines().filter(move |line| {
        if line.trim().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        !in_fence
    })
}

/// Splits prose into sentences: line breaks and `.`/`!`/`?`/`;` followed by whitespace end a
/// sentence; fenced code blocks are skipped (they are not statements of intent).
pub(super) fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in lines_outside_fences(text) {
        let trimmed = line.trim();
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

/// The markers of [`CONSTRAINT_RE`] that also describe what a feature does ("a flag that
/// prints only the count", "… without POSTing"): alone, in a sentence that opens with a task
/// verb, they make a request, not a rule.
static WEAK_CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(only|without|at most|at least|no more than)\b")
        .expect("weak constraint pattern is valid")
});

/// Verbs a request opens with.
pub(super) const TASK_VERBS: [&str; 20] = [
    "add",
    "implement",
    "create",
    "write",
    "build",
    "make",
    "fix",
    "change",
    "update",
    "switch",
    "move",
    "rename",
    "remove",
    "delete",
    "refactor",
    "bump",
    "run",
    "set",
    "port",
    "support",
];

/// The first word of a sentence, lowercase, punctuation trimmed.
fn first_word(sentence: &str) -> String {
    sentence
        .split_whitespace()
        .next()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .unwrap_or_default()
}

/// Whether a user text states only rules ("Never post to the family group; only to my DMs."):
/// each sentence is a constraint and none opens with a task verb or asks. Its sentences are
/// Constraints & Preferences; it asks for no work, so it is no goal.
pub(super) fn states_only_rules(text: &str) -> bool {
    let all = sentences(text);
    !all.is_empty()
        && all.iter().all(|s| {
            CONSTRAINT_RE.is_match(s)
                && is_constraint(s)
                && !is_question(s)
                && !TASK_VERBS.contains(&first_word(s).as_str())
        })
}

/// Whether a sentence matching [`CONSTRAINT_RE`] states a rule (see [`WEAK_CONSTRAINT_RE`]).
pub(super) fn is_constraint(sentence: &str) -> bool {
    let strong = CONSTRAINT_RE
        .find_iter(sentence)
        .any(|m| !WEAK_CONSTRAINT_RE.is_match(m.as_str()));
    strong || !TASK_VERBS.contains(&first_word(sentence).as_str())
}

/// Assistant sentences that announce a choice (`going with`, `instead of`, …, a few common
/// non-English forms too, since sessions are not all in English) or give its reason and
/// consequence (`X is breaking, so it gets the prefix`; not `so it will`, which is a forecast).
pub(super) static DECISION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(i'll use|i will use|we'll use|we will use|let's use|let's go with|going with|go with|decided|decide to|decision|chose|chosen|choose to|opted|opt for|instead of|instead|rather than|switch(ed|ing)? to|the approach|approach is|the plan is|will use|better to|statt|anstatt|stattdessen|entschieden|plutôt que|au lieu de|en lugar de|en vez de|invece di)\b|,\s*so (?:it|this|that|we|i) (?:gets?|should|must|needs? to|goes)\b",
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

/// The parts of a shell command line: split at `|`, `;` and `&` outside quotes, so a pattern
/// such as `'setTimeout|Date.now'` stays in its part.
pub(super) fn command_parts(command: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (i, c) in command.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '|' | ';' | '&') => {
                parts.push(&command[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&command[start..]);
    parts
}

/// Read-only exploration (`ls`, `find`, `cat`, `grep`, `git log`, `sed -n`, a plain `curl`
/// GET, `sleep` while polling…, no redirect): not progress. Every part of a pipeline or chain
/// must only look (`cd` moves, it changes nothing).
pub(super) fn is_exploration(command: &str) -> bool {
    const LOOK: [&str; 30] = [
        "ls", "ll", "find", "cat", "head", "tail", "grep", "egrep", "fgrep", "rg", "ag", "ack",
        "fd", "tree", "pwd", "wc", "which", "echo", "stat", "file", "du", "less", "more", "jq",
        "sort", "uniq", "nl", "cd", "type", "sleep",
    ];
    const GIT_LOOK: [&str; 7] = ["log", "status", "diff", "show", "grep", "blame", "ls-files"];
    /// `curl` flags that send, upload or write: with one, the call changes something.
    const CURL_WRITES: [&str; 12] = [
        "-X",
        "--request",
        "-d",
        "--data",
        "--data-raw",
        "--data-binary",
        "-F",
        "--form",
        "-T",
        "--upload-file",
        "-o",
        "--output",
    ];
    // A redirect writes a file (`cat > notes.md`, `echo x >> .env`): that is work.
    if command.contains('>') {
        return false;
    }
    let mut any = false;
    for part in command_parts(command) {
        let words: Vec<&str> = part.split_whitespace().collect();
        let Some(&first) = words.first() else {
            continue;
        };
        any = true;
        let looks = match first {
            "git" => words
                .iter()
                .skip(1)
                .find(|w| !w.starts_with('-'))
                .is_some_and(|sub| GIT_LOOK.contains(sub)),
            "sed" => words.get(1) == Some(&"-n"),
            "curl" => !words.iter().any(|w| {
                CURL_WRITES
                    .iter()
                    .any(|f| w == f || w.starts_with(&format!("{f}=")))
            }),
            w => LOOK.contains(&w),
        };
        if !looks {
            return false;
        }
    }
    any
}

/// A sentence that leads into what follows ("The approach:", "Now let me look at it:"): it ends
/// on a colon and says nothing by itself.
pub(super) fn is_lead_in(sentence: &str) -> bool {
    sentence
        .trim_end_matches(['*', '_', ' '])
        .ends_with([':', '：'])
}

/// Whether a sentence is a complete statement: three words or more, not a lead-in, not ending on
/// a word no statement ends on ("Now let", "and then the").
pub(super) fn is_statement(sentence: &str) -> bool {
    const DANGLING: [&str; 22] = [
        "and", "or", "but", "the", "a", "an", "to", "of", "with", "for", "in", "on", "at", "by",
        "from", "that", "which", "then", "so", "let", "me", "is",
    ];
    let t = sentence.trim().trim_end_matches(['*', '_', '`', ' ']);
    if is_lead_in(t) || t.ends_with(',') || t.ends_with(" -") || t.ends_with('—') {
        return false;
    }
    let words: Vec<String> = t
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    words.len() >= 3
        && words
            .last()
            .is_some_and(|w| !DANGLING.contains(&w.as_str()))
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

// ---------------------------------------------------------------------------------------------
// Round two: clauses, statements of work done, questions, slash commands, error headlines
// ---------------------------------------------------------------------------------------------

/// Where a sentence turns from what was done to what comes next: ", and I will now …",
/// " so I'll …". Group 1 starts the new clause.
static FUTURE_CLAUSE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?:,\s*(?:and\s+then\s+|and\s+|so\s+|then\s+|but\s+)?|\s+(?:and\s+then|and|so|then|but)\s+)((?:i|we)(?:'ll|\s+will|\s+am going to|\s+are going to|\s+need to|\s+still need to|\s+have to)\b)",
    )
    .expect("future clause pattern is valid")
});

/// Splits a sentence into clauses at the point where it turns to what comes next, so "X is
/// fixed, and I will now do Y" reports X as done and Y as next. Most sentences are one clause.
pub(super) fn clauses(sentence: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    for caps in FUTURE_CLAUSE_RE.captures_iter(sentence) {
        let (Some(whole), Some(next)) = (caps.get(0), caps.get(1)) else {
            continue;
        };
        if whole.start() <= start {
            continue;
        }
        push_sentence(&mut out, &sentence[start..whole.start()]);
        start = next.start();
    }
    push_sentence(&mut out, &sentence[start..]);
    out
}

/// What was announced as done: first-person past tense ("I've rewritten", "we added"), a state
/// reached ("is done", "is in place", "works now", "passes now") or a fix (see [`FIXED_RE`]).
pub(super) static REPORTED_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(\b(?:i|we)(?:'ve|\s+have)?\s+(?:now\s+|just\s+|also\s+|already\s+)?(?:added|updated|fixed|implemented|created|wrote|written|rewrote|rewritten|removed|renamed|refactored|moved|replaced|changed|deployed|merged|pushed|committed|configured|installed|migrated|converted|switched|documented|extracted|bumped|enabled|disabled|applied|cleaned|finished|completed)\b|\b(?:is|are)\s+(?:now\s+|all\s+|also\s+)?(?:done|finished|complete|completed|in place|fixed|green)\b|\b(?:is|are)\s+in\s*[:.]|^done\b|\bworks now\b|\bnow works\b|\bpass(?:es)? now\b|\bnow pass(?:es)?\b|\b(?:tests?|build|lint|ci|checks?|suite)\s+(?:now\s+|all\s+)?(?:pass|passes|passed|succeeds?|succeeded)\b|\b(?:replaced|rewrote|renamed|switched|converted|migrated|implemented)\b)",
    )
    .expect("reported pattern is valid")
});

/// A clause about the future: it announces, it does not report.
pub(super) static FUTURE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(will|i'll|we'll|going to|next|let me|let's|need to|needs to|have to|has to|should|todo|then i)\b",
    )
    .expect("future pattern is valid")
});

/// Whether a clause reports work as done (not negated, not about the future, not a question).
pub(super) fn reports_done(clause: &str) -> bool {
    (REPORTED_RE.is_match(clause) || FIXED_RE.is_match(clause))
        && !NEGATION_RE.is_match(clause)
        && !FUTURE_RE.is_match(clause)
        && !is_question(clause)
}

/// A question, not a statement: it ends with `?`, or it opens with an auxiliary and a pronoun
/// ("should we …", "can you …") as questions typed without the mark do.
pub(super) fn is_question(sentence: &str) -> bool {
    let t = sentence
        .trim()
        .trim_end_matches(['"', '\'', ')', ']', '*', '_', '`']);
    if t.ends_with('?') {
        return true;
    }
    const AUX: [&str; 14] = [
        "should", "could", "can", "would", "will", "shall", "may", "do", "does", "did", "is",
        "are", "was", "were",
    ];
    const PRONOUNS: [&str; 8] = ["i", "we", "you", "it", "they", "there", "this", "that"];
    let mut words = t.split_whitespace().map(|w| {
        w.trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase()
    });
    match (words.next(), words.next()) {
        (Some(a), Some(p)) => AUX.contains(&a.as_str()) && PRONOUNS.contains(&p.as_str()),
        _ => false,
    }
}

/// A harness command typed by the user (`/model sonnet`, `/mode plan`, `/compact`): the first
/// word is `/name` (not a path such as `/etc/hosts`). It configures the agent; it is no task.
pub(super) fn is_slash_command(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or("");
    let Some(name) = first.strip_prefix('/') else {
        return false;
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        && text.lines().count() == 1
        && text.split_whitespace().count() <= 6
}

/// A line that states an error (a compiler or runtime message, an assertion, a refusal), as
/// opposed to a test name or a summary count.
static ERROR_LINE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(\berror\b|\berror\[|[a-z](?:error|exception)\b|\bpanicked\b|\bpanic:|\bfatal\b|\bassertion\b|\bcannot\b|\bcan't\b|\bcould not\b|\bcouldn't\b|\bnot found\b|\bundefined\b|\bunresolved\b|\bdenied\b|\brefused\b|\btimed out\b|\btimeout\b|\bERR!|\bunexpected\b|\binvalid\b|\bno such\b|\bmissing\b)",
    )
    .expect("error line pattern is valid")
});

/// A line that says something failed without saying why (`FAIL test/x`, `--- FAIL: TestX`).
static FAIL_LINE_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\bfail(?:ed|ure|s)?\b").expect("fail line pattern is valid"));

/// The line of a failure's output that says what went wrong: the first error statement with a
/// message (five words or more), else the first error statement, else the first line saying
/// something failed, else the first line. Pi's `Command exited with code
/// N` trailer is never it.
pub(super) fn error_headline(text: &str) -> &str {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !EXIT_CODE_RE.is_match(l))
        .collect();
    // A line with a message beats a bare code (`npm ERR! code EUSAGE` before the sentence).
    let words = |l: &str| {
        l.split(|c: char| !c.is_alphabetic())
            .filter(|w| w.chars().count() >= 2)
            .count()
    };
    lines
        .iter()
        .find(|l| ERROR_LINE_RE.is_match(l) && words(l) >= 5)
        .or_else(|| lines.iter().find(|l| ERROR_LINE_RE.is_match(l)))
        .or_else(|| lines.iter().find(|l| FAIL_LINE_RE.is_match(l)))
        .or_else(|| lines.first())
        .copied()
        .unwrap_or("")
}

/// A line compared across runs: lowercase, whitespace collapsed, every digit run as `#` (line
/// numbers, timings and counts move between runs of the same error).
pub(super) fn masked(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_digits = false;
    for word in line.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        for c in word.chars() {
            if c.is_ascii_digit() {
                if !in_digits {
                    out.push('#');
                }
                in_digits = true;
            } else {
                in_digits = false;
                out.extend(c.to_lowercase());
            }
        }
        in_digits = false;
    }
    out
}

/// Whether `output` still shows the error whose headline is `headline` (compared masked).
pub(super) fn still_shows(output: &str, headline: &str) -> bool {
    let wanted = masked(headline);
    if wanted.chars().count() < 4 {
        return true;
    }
    output.lines().any(|l| masked(l).contains(&wanted))
}

/// Identifiers in an error message that a sentence about it would repeat: inline code and
/// quoted names, `CamelCase` and `snake_case` words, error codes.
pub(super) fn identifiers(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, part) in text.split(['`', '\'', '"']).enumerate() {
        let part = part.trim();
        if k % 2 == 1 && part.chars().count() >= 3 && !part.contains(char::is_whitespace) {
            out.push(part.to_lowercase());
        }
    }
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let camel = word.chars().skip(1).any(|c| c.is_uppercase())
            && word.chars().any(|c| c.is_lowercase());
        let snake = word.trim_matches('_').contains('_');
        if word.chars().count() >= 4 && (camel || snake) {
            out.push(word.to_lowercase());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The content words of a text as crude stems (see `handoff::words`): what the sections
/// compare items by, and what the handoff check matches a summary's sentences with.
pub(super) use crate::handoff::words::stems;
