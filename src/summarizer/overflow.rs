//! Classification of failed or suspicious replies: context overflow, recoverable length stops and
//! transient (retryable) errors (overflow.md §1–§4).
//!
//! Pi decides between "compact and retry", "back off and retry" and "give up" from the error text
//! and usage of an assistant message. The daemon must make the same decision both for its own
//! summarization calls and for assistant messages it reads from Pi session files, so the
//! functions here take plain facts (stop reason, error text, token counts) rather than a reply.
//!
//! Regex porting: JavaScript's `/i` on these ASCII patterns folds ASCII letters only (it never
//! matches `ſ` or the Kelvin sign as Rust's Unicode folding would), so we lowercase the haystack
//! with ASCII rules and write the patterns in lowercase. `\d` becomes `[0-9]`, JS `.` (which
//! stops at `\n`, `\r`, U+2028 and U+2029) and JS `\s` are spelled out as classes.

use std::sync::LazyLock;

use regex::Regex;

use super::types::{AssistantReply, StopReason, Usage};

/// The parts of an assistant message the classifiers look at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplyFacts<'a> {
    pub stop_reason: StopReason,
    pub error_message: Option<&'a str>,
    pub input: u64,
    pub cache_read: u64,
    pub output: u64,
}

impl<'a> ReplyFacts<'a> {
    pub fn new(stop_reason: StopReason, error_message: Option<&'a str>, usage: &Usage) -> Self {
        ReplyFacts {
            stop_reason,
            error_message,
            input: usage.input,
            cache_read: usage.cache_read,
            output: usage.output,
        }
    }
}

impl<'a> From<&'a AssistantReply> for ReplyFacts<'a> {
    fn from(r: &'a AssistantReply) -> Self {
        ReplyFacts::new(r.stop_reason, r.error_message.as_deref(), &r.usage)
    }
}

/// JS `.` without the `s` flag.
const DOT: &str = r"[^\n\r\x{2028}\x{2029}]";
/// JS `\s`.
const WS: &str = r"[\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}]";

/// Compiles a lowercase pattern written with the `DOT`/`WS` placeholders `{dot}` and `{ws}`.
fn compile(pattern: &str) -> Regex {
    let source = pattern.replace("{dot}", DOT).replace("{ws}", WS);
    // The patterns are constants; a failure here is a programming error caught by the tests.
    Regex::new(&source).expect("static overflow pattern compiles")
}

/// overflow.md §2 OVERFLOW_PATTERNS, in source order, lowercase.
const OVERFLOW_SOURCES: [&str; 25] = [
    r"prompt is too long",
    r"request_too_large",
    r"input is too long for requested model",
    r"exceeds the context window",
    r"exceeds (?:the )?(?:model'?s )?maximum context length(?: of [0-9,]+ tokens?|{ws}*\([0-9,]+\))",
    r"input token count{dot}*exceeds the maximum",
    r"maximum prompt length is [0-9]+",
    r"reduce the length of the messages",
    r"maximum context length is [0-9]+ tokens",
    r"exceeds (?:the )?maximum allowed input length of [0-9,]+ tokens?",
    r"input \([0-9]+ tokens\) is longer than the model'?s context length \([0-9]+ tokens\)",
    r"exceeds the limit of [0-9]+",
    r"exceeds the available context size",
    r"greater than the context length",
    r"context window exceeds limit",
    r"exceeded model token limit",
    r"too large for model with [0-9]+ maximum context length",
    r"prompt has [0-9,]+ tokens?, but the configured context size is [0-9,]+ tokens?",
    r"model_context_window_exceeded",
    r"prompt too long; exceeded (?:max )?context length",
    r"range of input length should be",
    r"context[_ ]length[_ ]exceeded",
    r"too many tokens",
    r"token limit exceeded",
    r"^4(?:00|13){ws}*(?:status code)?{ws}*\(no body\)",
];

/// overflow.md §2 NON_OVERFLOW_PATTERNS, lowercase.
const NON_OVERFLOW_SOURCES: [&str; 3] = [
    r"^(?:throttling error|service unavailable):",
    r"rate limit",
    r"too many requests",
];

static OVERFLOW: LazyLock<Vec<Regex>> =
    LazyLock::new(|| OVERFLOW_SOURCES.iter().map(|p| compile(p)).collect());
static NON_OVERFLOW: LazyLock<Vec<Regex>> =
    LazyLock::new(|| NON_OVERFLOW_SOURCES.iter().map(|p| compile(p)).collect());

static NON_RETRYABLE: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        &[
            "gousagelimiterror",
            "freeusagelimiterror",
            "monthly usage limit reached",
            "available balance",
            "insufficient_quota",
            "out of budget",
            "quota exceeded",
            "billing",
        ]
        .join("|"),
    )
});

static RETRYABLE: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        &[
            "overloaded",
            "rate{dot}?limit",
            "too many requests",
            "429",
            "500",
            "502",
            "503",
            "504",
            "524",
            "service{dot}?unavailable",
            "server{dot}?error",
            "internal{dot}?error",
            "provider{dot}?returned{dot}?error",
            "exceeded request buffer limit while retrying upstream",
            "network{dot}?error",
            "connection{dot}?error",
            "connection{dot}?refused",
            "connection{dot}?lost",
            "other side closed",
            "fetch failed",
            "getaddrinfo",
            "enotfound",
            "eai_again",
            "upstream{dot}?connect",
            "reset before headers",
            "socket hang up",
            "socket connection was closed",
            "timed? out",
            "timeout",
            "terminated",
            "websocket{dot}?closed",
            "websocket{dot}?error",
            "ended without",
            "stream ended before message_stop",
            "stream ended before a terminal response event",
            "http2 request did not get a response",
            "retry delay",
            "you can retry your request",
            "try your request again",
            "please retry your request",
            "resourceexhausted",
        ]
        .join("|"),
    )
});

/// Whether the error text names a context overflow (case 1 of overflow.md §1, exclusions first).
pub fn is_overflow_error_text(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    !NON_OVERFLOW.iter().any(|r| r.is_match(&lower)) && OVERFLOW.iter().any(|r| r.is_match(&lower))
}

/// pi-ai's `isContextOverflow`: an overflow error text, a successful reply whose input exceeds
/// the window (silent overflow), or an empty `length` stop at ≥ 99 % of the window. A
/// `context_window` of 0 disables the two usage-based cases.
pub fn is_context_overflow(facts: &ReplyFacts<'_>, context_window: u64) -> bool {
    if facts.stop_reason == StopReason::Error {
        if let Some(msg) = facts.error_message.filter(|m| !m.is_empty()) {
            if is_overflow_error_text(msg) {
                return true;
            }
        }
    }
    let input = facts.input + facts.cache_read;
    if context_window > 0 && facts.stop_reason == StopReason::Stop && input > context_window {
        return true;
    }
    if context_window > 0
        && facts.stop_reason == StopReason::Length
        && facts.output == 0
        && input as f64 >= context_window as f64 * 0.99
    {
        return true;
    }
    false
}

/// pi-ai's `isRecoverableLength`: a `length` stop that produced fewer tokens than the model could
/// have (Pi passes the model's own `maxTokens`).
pub fn is_recoverable_length(facts: &ReplyFacts<'_>, desired_max_output: u64) -> bool {
    facts.stop_reason == StopReason::Length
        && desired_max_output > 0
        && facts.output < desired_max_output
}

/// Whether error text looks transient (overflow.md §4): not a quota/billing failure, and
/// matching one of the retryable wordings.
pub fn is_retryable_error_text(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    !NON_RETRYABLE.is_match(&lower) && RETRYABLE.is_match(&lower)
}

/// pi-ai's `isRetryableAssistantError`.
pub fn is_retryable_assistant_error(stop_reason: StopReason, error_message: Option<&str>) -> bool {
    stop_reason == StopReason::Error
        && error_message.is_some_and(|m| !m.is_empty() && is_retryable_error_text(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(msg: &str) -> bool {
        is_context_overflow(
            &ReplyFacts {
                stop_reason: StopReason::Error,
                error_message: Some(msg),
                input: 0,
                cache_read: 0,
                output: 0,
            },
            0,
        )
    }

    fn usage_case(stop: StopReason, input: u64, cache_read: u64, output: u64, w: u64) -> bool {
        is_context_overflow(
            &ReplyFacts {
                stop_reason: stop,
                error_message: None,
                input,
                cache_read,
                output,
            },
            w,
        )
    }

    #[test]
    fn overflow_positive_vectors() {
        let vectors = [
            "prompt is too long: 213462 tokens > 200000 maximum",
            r#"413 {"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
            "Your input exceeds the context window of this model",
            "Requested token count exceeds the model's maximum context length of 131072 tokens",
            "Input length (265330) exceeds model's maximum context length (262144).",
            "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)",
            "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
            "Please reduce the length of the messages or completion",
            "This endpoint's maximum context length is 128000 tokens. However, you requested about 130000 tokens",
            "Input length 5 exceeds the maximum allowed input length of 4 tokens.",
            "The input (5 tokens) is longer than the model's context length (4 tokens).",
            "the request exceeds the available context size, try increasing it",
            "tokens to keep from the initial prompt is greater than the context length",
            "prompt token count of 5 exceeds the limit of 4",
            "invalid params, context window exceeds limit",
            "Your request exceeded model token limit: 5 (requested: 6)",
            "Prompt has 5 tokens, but the configured context size is 4 tokens",
            "400 status code (no body)",
            "413 (no body)",
            "Prompt contains 5 tokens ... too large for model with 4 maximum context length",
            "Range of input length should be [1, 4]",
            "prompt too long; exceeded max context length by 5 tokens",
            // From the porting notes / other list entries.
            "ThrottlingException: Too many tokens, please wait before trying again.",
            "input is too long for requested model",
            "model_context_window_exceeded",
            r#"400 {"error":{"message":"x","code":"context_length_exceeded"}}"#,
            "context length exceeded",
            "Token limit exceeded for this request",
            "PROMPT IS TOO LONG",
            "Input is too long for requested model.",
        ];
        for v in vectors {
            assert!(err(v), "expected overflow: {v}");
        }
    }

    #[test]
    fn overflow_negative_vectors() {
        let vectors = [
            "Rate limit reached: too many tokens per minute",
            "Throttling error: Too many tokens",
            "Service unavailable: too many tokens",
            "too many requests: too many tokens",
            "500 (no body)",
            // Anchored: must be at the start.
            "error 400 status code (no body)",
            "",
            "Connection error",
            // JS `.` does not cross line breaks (pattern 6).
            "input token count\nexceeds the maximum",
            "input token count\u{2028}exceeds the maximum",
            // JS `/i` folds ASCII only: the long s does not match `s`.
            "prompt i\u{17F} too long",
        ];
        for v in vectors {
            assert!(!err(v), "expected no overflow: {v:?}");
        }
        // Same text is only an overflow with an error stop reason.
        assert!(!is_context_overflow(
            &ReplyFacts {
                stop_reason: StopReason::Stop,
                error_message: Some("prompt is too long"),
                input: 0,
                cache_read: 0,
                output: 0
            },
            0
        ));
        assert!(err("input token count: 5 exceeds the maximum"));
        assert!(err("400\u{A0}(no body)"));
    }

    #[test]
    fn silent_and_length_overflow_boundaries() {
        assert!(usage_case(StopReason::Stop, 90, 11, 5, 100));
        assert!(!usage_case(StopReason::Stop, 90, 10, 5, 100));
        assert!(!usage_case(StopReason::Stop, 900, 0, 5, 0));
        assert!(usage_case(StopReason::Length, 99, 0, 0, 100));
        assert!(!usage_case(StopReason::Length, 98, 0, 0, 100));
        assert!(usage_case(StopReason::Length, 98, 1, 0, 100));
        assert!(!usage_case(StopReason::Length, 99, 0, 1, 100));
        assert!(!usage_case(StopReason::Length, 99, 0, 0, 0));
        // cacheWrite is not counted: only input + cacheRead.
        let u = Usage {
            input: 50,
            cache_write: 60,
            ..Default::default()
        };
        assert!(!is_context_overflow(
            &ReplyFacts::new(StopReason::Stop, None, &u),
            100
        ));
    }

    #[test]
    fn recoverable_length() {
        let f = |stop, output| ReplyFacts {
            stop_reason: stop,
            error_message: None,
            input: 0,
            cache_read: 0,
            output,
        };
        assert!(is_recoverable_length(&f(StopReason::Length, 10), 11));
        assert!(!is_recoverable_length(&f(StopReason::Length, 11), 11));
        assert!(!is_recoverable_length(&f(StopReason::Length, 0), 0));
        assert!(!is_recoverable_length(&f(StopReason::Stop, 0), 11));
    }

    #[test]
    fn retryable_errors() {
        let yes = [
            "429 Too Many Requests",
            "Overloaded",
            "rate_limit_error",
            "ratelimit",
            "HTTP 15003 code",
            "Service Unavailable",
            "internal_error",
            "Provider returned error",
            "fetch failed",
            "getaddrinfo ENOTFOUND api.example.com",
            "Request timed out",
            "Request time out",
            "timeout",
            "terminated",
            "Stream ended without finish_reason",
            "Anthropic stream ended before message_stop",
            "OpenAI Responses stream ended before a terminal response event",
            "ResourceExhausted",
            "Network error: stream terminated",
            "Connection error: refused",
            "socket hang up",
            "Please retry your request",
        ];
        for m in yes {
            assert!(
                is_retryable_assistant_error(StopReason::Error, Some(m)),
                "expected retryable: {m}"
            );
        }
        let no = [
            "429 insufficient_quota",
            "503 billing problem",
            "Monthly usage limit reached (429)",
            "prompt is too long",
            "400 invalid request",
            "rate\nlimit",
        ];
        for m in no {
            assert!(
                !is_retryable_assistant_error(StopReason::Error, Some(m)),
                "expected not retryable: {m:?}"
            );
        }
        assert!(!is_retryable_assistant_error(StopReason::Error, None));
        assert!(!is_retryable_assistant_error(StopReason::Error, Some("")));
        assert!(!is_retryable_assistant_error(
            StopReason::Length,
            Some("timeout")
        ));
        assert!(!is_retryable_assistant_error(
            StopReason::Aborted,
            Some("timeout")
        ));
    }

    #[test]
    fn all_patterns_compile() {
        assert_eq!(OVERFLOW.len(), 25);
        assert_eq!(NON_OVERFLOW.len(), 3);
        LazyLock::force(&RETRYABLE);
        LazyLock::force(&NON_RETRYABLE);
    }
}
