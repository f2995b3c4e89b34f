//! Secret hygiene for summarizer input and output (beyond Pi).
//!
//! Coding sessions are full of credentials: `.env` files the agent read, `curl` commands with
//! `Authorization` headers, keys pasted by the user. Compaction sends that history to a
//! summarization provider (possibly a different one from the agent's) and writes the summary
//! back into the session, where it is replayed on every later turn. Redacting secrets before
//! either happens keeps a compaction from spreading a key further than the session already did.
//!
//! Redaction must not damage code either: the model summarizing `const apiKey = options?.apiKey`
//! or `{ key: "upvotes" }` needs to read them as written. So the rules judge the *value*, not the
//! presence of a word:
//! - by shape: well-known token formats (provider prefixes with a random tail, JWTs, PEM
//!   private-key blocks, webhook URLs), passwords in URLs, `Authorization` header values;
//! - by context: a literal assigned to a secret-named key (`API_KEY=…`, `"client_secret": "…"`,
//!   `--password …`), where "secret-named" means the key's head word is a secret word (not
//!   `sort_key`, `max_tokens`, `password_hash`) and the literal looks like a secret (random
//!   enough; not a placeholder, an elided example, a reference, code or a type).
//!
//! The name is kept and only the value becomes `[REDACTED]`, so a summary still says *which* key
//! was set. `[redaction] allow` patterns spare values the rules would redact; `deny` patterns
//! redact whatever they match. Redaction is idempotent: redacting twice equals redacting once.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Whether and how secrets are redacted before text reaches a provider. On by default: a user
/// has to opt out of hygiene, not into it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct RedactionConfig {
    pub enabled: bool,
    /// Values matching one of these are never redacted (a test key the session must keep).
    pub allow: Patterns,
    /// Text matching one of these is always redacted (an internal token format).
    pub deny: Patterns,
}

impl Default for RedactionConfig {
    fn default() -> Self {
        RedactionConfig {
            enabled: true,
            allow: Patterns::default(),
            deny: Patterns::default(),
        }
    }
}

impl RedactionConfig {
    /// Redaction off: text reaches the provider exactly as Pi sends it.
    pub fn disabled() -> Self {
        RedactionConfig {
            enabled: false,
            ..RedactionConfig::default()
        }
    }

    /// [`redact`] with this configuration's allow/deny patterns when enabled, the text
    /// untouched otherwise.
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.enabled {
            redact_with(text, &self.allow.0, &self.deny.0)
        } else {
            Cow::Borrowed(text)
        }
    }
}

/// A list of regular expressions from the configuration, compiled when the configuration is
/// loaded so a bad pattern is reported then, with its text and position.
#[derive(Debug, Clone, Default)]
pub struct Patterns(Vec<Regex>);

impl Patterns {
    /// Compiles `patterns`; the error names the offending pattern.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Patterns, String> {
        patterns
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Regex::new(p.as_ref())
                    .map_err(|e| format!("invalid pattern [{i}] {:?}: {e}", p.as_ref()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Patterns)
    }
}

impl PartialEq for Patterns {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|(a, b)| a.as_str() == b.as_str())
    }
}

impl Eq for Patterns {}

impl Serialize for Patterns {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Regex::as_str))
    }
}

impl<'de> Deserialize<'de> for Patterns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let list = Vec::<String>::deserialize(d)?;
        Patterns::new(&list).map_err(serde::de::Error::custom)
    }
}

/// PEM private-key blocks (also with JSON-escaped `\n`); the second alternative catches a block
/// cut off by truncated output.
static PEM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)(-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)(?:(.*?)(-----END ([A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)|((?:[A-Za-z0-9+/=\s]|\\n)*))",
    )
    .expect("PEM pattern is valid")
});

/// Passwords inside URLs (`postgres://user:pass@host`).
static URL_CREDS_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)([^\s@/]+)(@)")
        .expect("URL pattern is valid")
});

/// Secret-bearing query parameters (`?access_token=…`, `&sig=…`).
static URL_QUERY_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)([?&](?:access_token|token|api_key|apikey|key|sig|signature|client_secret|password|auth|x-amz-signature|x-amz-security-token)=)([^\s&#'\x22]+)",
    )
    .expect("query pattern is valid")
});

/// Token formats recognisable by shape alone. Group 1 is a prefix that is kept (it says what
/// kind of credential it was), group 2 the secret. `min_distinct` guards against placeholders
/// such as `ghp_xxxxxxxx`.
struct TokenRule {
    re: Regex,
    /// The secret must contain a digit (real tokens are random; prose is not).
    needs_digit: bool,
}

static TOKEN_RULES: LazyLock<Vec<TokenRule>> = LazyLock::new(|| {
    let rule = |p: &str, needs_digit: bool| TokenRule {
        re: Regex::new(p).expect("token pattern is valid"),
        needs_digit,
    };
    vec![
        // Anthropic, OpenAI (project, service-account, admin and legacy keys).
        rule(
            r"\b(sk-(?:ant-(?:api|admin)\d\d-|ant-|proj-|svcacct-|admin-|None-)?)([A-Za-z0-9_-]{20,})",
            true,
        ),
        // GitHub classic and fine-grained tokens.
        rule(r"\b(gh[pousr]_)([A-Za-z0-9]{30,})\b", true),
        rule(r"\b(github_pat_)([A-Za-z0-9_]{40,})", true),
        // GitLab personal, runner and deploy tokens.
        rule(r"\b(gl(?:pat|rt|dt|ptt|cbt)-)([A-Za-z0-9_-]{20,})", false),
        // Slack tokens and app-level tokens.
        rule(r"\b(xox[abposre]-)([A-Za-z0-9-]{10,})", true),
        rule(r"\b(xapp-)([A-Za-z0-9-]{10,})", true),
        // AWS access key ids.
        rule(r"\b(AKIA|ASIA|AGPA|AIDA|AROA)([A-Z0-9]{16})\b", true),
        // Google API keys.
        rule(r"\b(AIza)([0-9A-Za-z_-]{35})", false),
        // Stripe secret, restricted and webhook-signing keys.
        rule(r"\b((?:sk|rk)_(?:live|test)_)([0-9A-Za-z]{16,})", true),
        rule(r"\b(whsec_)([0-9A-Za-z+/=]{24,})", true),
        // npm, PyPI, Hugging Face, DigitalOcean, Shopify, Mailgun, SendGrid, Twilio API keys.
        rule(r"\b(npm_)([A-Za-z0-9]{36})\b", true),
        rule(r"\b(pypi-)(AgE[A-Za-z0-9_-]{50,})", false),
        rule(r"\b(hf_)([A-Za-z0-9]{30,})\b", false),
        rule(r"\b(do[por]_v1_)([a-f0-9]{64})\b", true),
        rule(r"\b(shp(?:at|ss|ca|pa)_)([a-fA-F0-9]{32})\b", true),
        rule(r"\b(key-)([a-f0-9]{32})\b", true),
        rule(r"\b(SG\.)([A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})", false),
        rule(r"\b(SK)([0-9a-f]{32})\b", true),
        // Telegram bot tokens (`123456789:AA…`).
        rule(r"\b((?:bot)?\d{8,10}:)(AA[A-Za-z0-9_-]{33})\b", false),
        // Slack and Discord webhook URLs: the last path segment is the secret.
        rule(
            r"(https://hooks\.slack\.com/services/[A-Z0-9]+/[A-Z0-9]+/)([A-Za-z0-9]{16,})",
            false,
        ),
        rule(
            r"(https://(?:discord|discordapp)\.com/api/webhooks/\d+/)([A-Za-z0-9_-]{30,})",
            false,
        ),
        // JWTs (header.payload.signature, both base64url JSON objects).
        rule(
            r"\b()(eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
            false,
        ),
    ]
});

/// `Authorization: Bearer …` / `Basic …` header values, any length.
static AUTH_HEADER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:bearer|basic|token|digest)\s+)([A-Za-z0-9._~+/=-]+)"#,
    )
    .expect("auth header pattern is valid")
});

/// A bare bearer token (the header form is handled with its name above).
static BEARER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)").expect("bearer pattern is valid")
});

/// `--password VALUE`, `--api-token VALUE`: a secret-named flag followed by its value.
static FLAG_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(\s--?[A-Za-z][A-Za-z0-9-]*\s+)([^\s\x22'`;|&<>]+)")
        .expect("flag pattern is valid")
});

/// MySQL's `-pPASSWORD` (no space).
static MYSQL_P_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(\bmysql(?:dump|admin)?\b[^\n]*?\s-p)([^\s\x22'`;|&<>]+)")
        .expect("mysql pattern is valid")
});

/// `name <sep> value` where the name contains a secret-ish word (judged precisely by
/// [`is_secret_name`]). The value is a quoted string (also JSON-escaped quotes) or a bare word.
static ASSIGN_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)([A-Za-z0-9_.-]*(?:secret|token|key|passwd|password|pass|pwd|passphrase|credentials?)[A-Za-z0-9_.-]*)((?:\\?["'])?\s*(?::=|=>|[:=])\s*)(\\"[^"\\\n]*\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"'`,;&)\]}>]+)"#,
    )
    .expect("assignment pattern is valid")
});

/// Replaces secrets in `text` with `[REDACTED]`, keeping names and recognizable prefixes.
/// Returns `Cow::Borrowed` when nothing was found (the common case costs no copy).
pub fn redact(text: &str) -> Cow<'_, str> {
    redact_with(text, &[], &[])
}

/// [`redact`] with extra patterns: a candidate secret matching `allow` is kept; text matching
/// `deny` is redacted whatever the built-in rules say.
///
/// One pass of the rules can uncover a match for another rule (a value that ran into a key
/// block's `-----END` marker, say), so passes repeat until nothing changes (a few at most):
/// redacting redacted text is then a no-op, which is what lets summaries be redacted again
/// when they are merged into the next compaction.
fn redact_with<'a>(text: &'a str, allow: &[Regex], deny: &[Regex]) -> Cow<'a, str> {
    let mut out = match redact_pass(text, allow, deny) {
        Cow::Borrowed(_) => return Cow::Borrowed(text),
        Cow::Owned(s) => s,
    };
    for _ in 0..4 {
        match redact_pass(&out, allow, deny) {
            Cow::Owned(next) if next != out => out = next,
            _ => break,
        }
    }
    Cow::Owned(out)
}

/// One pass of every rule over `text`.
fn redact_pass<'a>(text: &'a str, allow: &[Regex], deny: &[Regex]) -> Cow<'a, str> {
    let allowed = |secret: &str| allow.iter().any(|re| re.is_match(secret));
    let mut out: Cow<str> = Cow::Borrowed(text);

    out = apply(out, &PEM_RE, |c| {
        let header = group(c, 1);
        let whole = group(c, 0);
        let body = c.get(3).or_else(|| c.get(6)).map_or("", |m| m.as_str());
        if body.replace("\\n", "").trim().is_empty() || body.contains(REDACTED) || allowed(body) {
            return whole.to_string();
        }
        let nl = if body.contains("\\n") { "\\n" } else { "\n" };
        match c.get(4) {
            Some(end) => format!("{header}{nl}{REDACTED}{nl}{}", end.as_str()),
            None if body.ends_with('\n') || body.ends_with("\\n") => {
                format!("{header}{nl}{REDACTED}{nl}")
            }
            None => format!("{header}{nl}{REDACTED}"),
        }
    });
    for rule in TOKEN_RULES.iter() {
        out = apply(out, &rule.re, |c| {
            let secret = group(c, 2);
            let keep = (rule.needs_digit && !secret.bytes().any(|b| b.is_ascii_digit()))
                || distinct_chars(secret) < 6
                || allowed(group(c, 0))
                || allowed(secret);
            if keep {
                return group(c, 0).to_string();
            }
            format!("{}{REDACTED}", group(c, 1))
        });
    }
    out = apply(out, &URL_CREDS_RE, |c| {
        let pass = group(c, 2);
        if is_placeholder(pass) || is_reference(pass) || pass.contains(REDACTED) || allowed(pass) {
            return group(c, 0).to_string();
        }
        format!("{}{REDACTED}{}", group(c, 1), group(c, 3))
    });
    out = apply(out, &URL_QUERY_RE, |c| {
        let value = group(c, 2);
        if !looks_random(value) || is_placeholder(value) || allowed(value) {
            return group(c, 0).to_string();
        }
        format!("{}{REDACTED}", group(c, 1))
    });
    for re in [&*AUTH_HEADER_RE, &*BEARER_RE] {
        out = apply(out, re, |c| {
            // A value never runs into a PEM boundary (`-----END …`) glued onto it: that stays,
            // so the key block around it is still recognised on the next pass.
            let full = group(c, 2);
            let (value, rest) = full.split_at(full.find("-----").unwrap_or(full.len()));
            if value.is_empty()
                || value.contains(REDACTED)
                || is_placeholder(value)
                || allowed(value)
            {
                return group(c, 0).to_string();
            }
            format!("{}{REDACTED}{rest}", group(c, 1))
        });
    }
    out = apply(out, &FLAG_RE, |c| {
        let flag = group(c, 1).trim().trim_start_matches('-');
        let value = group(c, 2);
        let judged = is_secret_name(flag) && is_secret_value(value, SecretKind::of(flag), false);
        if !judged || allowed(value) {
            return group(c, 0).to_string();
        }
        format!("{}{REDACTED}", group(c, 1))
    });
    out = apply(out, &MYSQL_P_RE, |c| {
        let value = group(c, 2);
        if !is_secret_value(value, SecretKind::Password, false) || allowed(value) {
            return group(c, 0).to_string();
        }
        format!("{}{REDACTED}", group(c, 1))
    });
    out = apply(out, &ASSIGN_RE, |c| {
        let whole = group(c, 0);
        let name = group(c, 1);
        let sep = group(c, 2);
        let value = group(c, 3);
        if !is_secret_name(name) {
            return whole.to_string();
        }
        // `NAME=value` in env style is configuration, not code: a plain word counts.
        let env_style = sep == "="
            && name.bytes().any(|b| b.is_ascii_uppercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        match redact_assigned(value, SecretKind::of(name), env_style) {
            Some(v) if !allowed(unquote(value).1) => format!("{name}{sep}{v}"),
            _ => whole.to_string(),
        }
    });
    for re in deny {
        out = apply(out, re, |c| {
            let whole = group(c, 0);
            if whole.is_empty() || whole == REDACTED {
                whole.to_string()
            } else {
                REDACTED.to_string()
            }
        });
    }

    match out {
        Cow::Owned(s) if s == text => Cow::Borrowed(text),
        other => other,
    }
}

fn group<'t>(c: &Captures<'t>, i: usize) -> &'t str {
    c.get(i).map_or("", |m| m.as_str())
}

/// Runs one rule, keeping the text borrowed while nothing matches.
fn apply<'a>(text: Cow<'a, str>, re: &Regex, f: impl Fn(&Captures) -> String) -> Cow<'a, str> {
    if !re.is_match(&text) {
        return text;
    }
    Cow::Owned(re.replace_all(&text, |c: &Captures| f(c)).into_owned())
}

fn distinct_chars(s: &str) -> usize {
    let mut seen: Vec<char> = s.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// What a secret-named key holds, which decides how random its value must look.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SecretKind {
    /// Chosen by a person: may be a plain word (`PASSWORD=correcthorse`).
    Password,
    /// Generated (a key, a token, a secret): must look random.
    Generated,
}

impl SecretKind {
    fn of(name: &str) -> SecretKind {
        let lower = name.to_ascii_lowercase();
        if ["pass", "pwd", "passphrase"]
            .iter()
            .any(|w| lower.contains(w))
        {
            SecretKind::Password
        } else {
            SecretKind::Generated
        }
    }
}

/// `(open quote, inner, close quote)` of an assigned value.
fn unquote(value: &str) -> (&str, &str, &str) {
    if let Some(i) = value
        .strip_prefix("\\\"")
        .and_then(|v| v.strip_suffix("\\\""))
    {
        ("\\\"", i, "\\\"")
    } else if value.len() >= 2 && (value.starts_with('"') || value.starts_with('\'')) {
        let q = &value[..1];
        let i = value
            .strip_prefix(q)
            .and_then(|v| v.strip_suffix(q))
            .unwrap_or("");
        (q, i, q)
    } else {
        ("", value, "")
    }
}

/// The redacted form of an assigned value (quotes kept), or `None` when it is not a secret.
fn redact_assigned(value: &str, kind: SecretKind, env_style: bool) -> Option<String> {
    let (open, inner, close) = unquote(value);
    if !is_secret_value(inner, kind, !open.is_empty() || env_style) {
        return None;
    }
    Some(format!("{open}{REDACTED}{close}"))
}

/// Whether `inner` (an assigned literal without quotes) is a secret. Never: short values,
/// placeholders and elided examples, references (`$VAR`, `${…}`, `process.env…`), code
/// (`args[++i]`, `options?.apiKey`, `getToken()`), types (`String`, `Option<String>`) and
/// structured identifiers (`agent:main:main`). Otherwise a password may be any word when it is
/// a literal (`quoted`: in quotes or env style), and needs a digit or symbol when bare; every
/// other secret must look random.
fn is_secret_value(inner: &str, kind: SecretKind, quoted: bool) -> bool {
    let v = inner.trim();
    let min = if kind == SecretKind::Password { 4 } else { 8 };
    if v.chars().count() < min || v.contains(REDACTED) {
        return false;
    }
    if is_placeholder(v) || is_reference(v) || is_code(v) {
        return false;
    }
    // Keys, tokens and generated passwords have no spaces or escape sequences; a quoted
    // value with them is prose or code (`token = "module\tclient"`).
    if v.contains(char::is_whitespace) || v.contains('\\') {
        return false;
    }
    match kind {
        SecretKind::Password if quoted => !is_type_word(v),
        SecretKind::Password => {
            !is_type_word(v)
                && v.bytes().any(|b| b.is_ascii_alphabetic())
                && v.bytes().any(|b| !b.is_ascii_alphabetic())
        }
        SecretKind::Generated => looks_random(v),
    }
}

/// Random enough for a generated credential: at least 8 characters, not a structured
/// identifier, and either letters mixed with digits, or a long mixed-case string whose
/// characters vary (Shannon entropy of at least 3.5 bits per character).
fn looks_random(v: &str) -> bool {
    let n = v.chars().count();
    if n < 8 || is_structured(v) {
        return false;
    }
    let digit = v.bytes().any(|b| b.is_ascii_digit());
    let alpha = v.bytes().any(|b| b.is_ascii_alphabetic());
    let upper = v.bytes().any(|b| b.is_ascii_uppercase());
    let lower = v.bytes().any(|b| b.is_ascii_lowercase());
    (digit && alpha && distinct_chars(v) >= 6) || (n >= 20 && upper && lower && entropy(v) >= 3.5)
}

fn entropy(v: &str) -> f64 {
    let chars: Vec<char> = v.chars().collect();
    let n = chars.len() as f64;
    let mut sorted = chars.clone();
    sorted.sort_unstable();
    let mut h = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let j = sorted[i..].iter().take_while(|&&c| c == sorted[i]).count();
        let p = j as f64 / n;
        h -= p * p.log2();
        i += j;
    }
    h
}

/// Words, short numbers and short alphanumerics joined by `:` `.` `/` `-` `_`: an identifier
/// (`agent:main:main`, `user:42:profile`, `docs/readme.md`, `v1.2.3`), not a secret.
fn is_structured(v: &str) -> bool {
    let parts: Vec<&str> = v
        .split([':', '.', '/', '-', '_', '@', '+'])
        .filter(|p| !p.is_empty())
        .collect();
    parts.len() >= 2
        && parts.iter().all(|p| {
            p.chars().all(|c| c.is_ascii_alphabetic())
                || (p.len() <= 4 && p.chars().all(|c| c.is_ascii_digit()))
                || p.len() <= 3
        })
}

/// Placeholders and elided examples: `YOUR_API_KEY`, `<token>`, `sk-...`, `xxxx`, `****`,
/// `changeme`, `REPLACE_ME`.
fn is_placeholder(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    const WORDS: [&str; 22] = [
        "changeme",
        "change_me",
        "change-me",
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "api_key",
        "test",
        "testing",
        "dummy",
        "example",
        "placeholder",
        "redacted",
        "none",
        "null",
        "todo",
        "fixme",
        "value",
        "foo",
        "bar",
    ];
    let masked = v.len() >= 3
        && v.chars()
            .all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '•' | '…' | '#' | '-' | '_'));
    let caps_name = v
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
        && v.bytes().any(|b| b == b'_' || b == b'-');
    masked
        || caps_name
        || WORDS.contains(&lower.as_str())
        || v.contains("...")
        || v.contains('…')
        || lower.contains("xxxx")
        || lower.contains("****")
        || v.starts_with('<')
        || v.starts_with('[')
        || [
            "your", "my-", "my_", "insert", "replace", "enter-", "enter_", "put-", "put_",
        ]
        .iter()
        .any(|p| lower.starts_with(p))
        || lower.contains("replace_me")
        || lower.contains("replace-me")
        || lower.ends_with("_here")
        || lower.ends_with("-here")
}

/// References to a secret kept elsewhere: `$VAR`, `${…}`, `{{ … }}`, `%(…)s`, `process.env…`.
fn is_reference(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    [
        "$",
        "{{",
        "%",
        "process.env",
        "os.environ",
        "env::",
        "env.",
        "import.meta.env",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
        || v.contains("${")
        || v.contains("$(")
}

/// Code, not a literal: calls, indexing, optional chaining, paths, arrows, member access on
/// identifiers (`self.token`, `options.apiKey`).
fn is_code(v: &str) -> bool {
    let punct = ['(', ')', '[', ']', '{', '}', '<', '>', '?', '`', ','];
    if v.contains(punct) || v.contains("::") || v.contains("=>") || v.starts_with('=') {
        return true;
    }
    let ident = |s: &str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
            && s.bytes().filter(u8::is_ascii_digit).count() <= 2
    };
    v.contains('.') && v.split('.').all(ident)
}

/// Type names and literal keywords: `String`, `string`, `Option`, `bool`, `true`, `None`.
fn is_type_word(v: &str) -> bool {
    const WORDS: [&str; 22] = [
        "string",
        "str",
        "number",
        "int",
        "integer",
        "bool",
        "boolean",
        "bytes",
        "any",
        "unknown",
        "object",
        "undefined",
        "true",
        "false",
        "required",
        "optional",
        "text",
        "varchar",
        "char",
        "hidden",
        "masked",
        "nil",
    ];
    let lower = v.to_ascii_lowercase();
    let capitalized_ident = v.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && v.chars().skip(1).all(|c| c.is_ascii_alphabetic())
        && v.chars().skip(1).any(|c| c.is_ascii_lowercase());
    WORDS.contains(&lower.as_str()) || capitalized_ident
}

/// The words a secret-named key ends with (its head word).
const SECRET_WORDS: [&str; 10] = [
    "secret",
    "token",
    "key",
    "passwd",
    "password",
    "pass",
    "pwd",
    "passphrase",
    "credential",
    "credentials",
];

/// Qualifiers that make a key/token name something other than a credential: `sort_key`,
/// `max_tokens`, `public_key`, `page_token`, `eos_token`.
const HARMLESS_QUALIFIERS: [&str; 52] = [
    "sort",
    "primary",
    "foreign",
    "cache",
    "partition",
    "row",
    "idempotency",
    "public",
    "publishable",
    "routing",
    "object",
    "file",
    "map",
    "lookup",
    "index",
    "group",
    "dedupe",
    "dedup",
    "unique",
    "composite",
    "hot",
    "shortcut",
    "i18n",
    "translation",
    "label",
    "react",
    "storage",
    "query",
    "search",
    "cursor",
    "page",
    "continuation",
    "pagination",
    "sync",
    "lock",
    "event",
    "metric",
    "column",
    "field",
    "attribute",
    "prop",
    "item",
    "entry",
    "node",
    "list",
    "max",
    "min",
    "num",
    "total",
    "cancel",
    "cancellation",
    "eos",
];

/// Parts a name may end with after its secret word and still name the secret's value
/// (`password_confirmation`, `secret_key_base`, `token_b64`).
const VALUE_SUFFIXES: [&str; 10] = [
    "value",
    "b64",
    "base64",
    "hex",
    "raw",
    "plain",
    "plaintext",
    "confirmation",
    "base",
    "str",
];

/// Words that fuse with a secret word without a separator (`apikey`, `authtoken`, `PGPASSWORD`).
const FUSED: [&str; 22] = [
    "api",
    "auth",
    "access",
    "secret",
    "private",
    "refresh",
    "session",
    "client",
    "master",
    "pg",
    "db",
    "admin",
    "root",
    "user",
    "app",
    "bot",
    "service",
    "svc",
    "smtp",
    "bearer",
    "signing",
    "encryption",
];

/// Splits a name into lowercase parts at separators and camelCase boundaries
/// (`requesterSessionKey` → requester, session, key; `APIKey` → api, key).
fn name_parts(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for chunk in name.split(|c: char| !c.is_ascii_alphanumeric()) {
        let chars: Vec<char> = chunk.chars().collect();
        let mut current = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let boundary = c.is_ascii_uppercase()
                && prev.is_some_and(|p| {
                    p.is_ascii_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
                });
            if boundary && !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            current.push(c.to_ascii_lowercase());
        }
        if !current.is_empty() {
            parts.push(current);
        }
    }
    parts
}

/// Whether `name` (a variable, key, flag or header name) names a credential: its head word —
/// the last part, or the last before value suffixes — is a secret word, possibly fused
/// (`apikey`), and not qualified into something else (`sort_key`, `max_tokens`,
/// `password_hash`, `tokenizer`, `keyboard`).
fn is_secret_name(name: &str) -> bool {
    let name = name.trim_matches(|c: char| c == '"' || c == '\'' || c == '\\' || c == '-');
    let mut parts = name_parts(name);
    while parts.len() > 1
        && parts
            .last()
            .is_some_and(|p| VALUE_SUFFIXES.contains(&p.as_str()))
    {
        parts.pop();
    }
    let Some(head) = parts.last() else {
        return false;
    };
    let qualifier = parts.len().checked_sub(2).and_then(|i| parts.get(i));
    let direct = SECRET_WORDS.contains(&head.as_str());
    let fused = !direct
        && SECRET_WORDS.iter().any(|w| {
            head.strip_suffix(w)
                .is_some_and(|rest| FUSED.contains(&rest))
        });
    if !(direct || fused) {
        return false;
    }
    // `pass` alone is too common a word (`--pass 2`, `pass: true`); it counts fused or
    // qualified (`DB_PASS`, `smtp_pass`).
    if head == "pass" && qualifier.is_none() {
        return false;
    }
    !qualifier.is_some_and(|q| HARMLESS_QUALIFIERS.contains(&q.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// (text, the secret that must disappear)
    fn secrets() -> Vec<(String, String)> {
        let cases: Vec<(&str, &str)> = vec![
            ("export OPENAI_API_KEY=sk-abc123DEF456ghi789JKL012mno345", "sk-abc123DEF456ghi789JKL012mno345"),
            ("client = OpenAI(api_key=\"sk-proj-Zq3vX9kLm2Np8Rt4Wy6Bc1Df5Gh7Jk0LmNoPqRs\")", "Zq3vX9kLm2Np8Rt4Wy6Bc1Df5Gh7Jk0LmNoPqRs"),
            ("ANTHROPIC_API_KEY: sk-ant-api03-AbCdEf0123456789_ghIJklMNopQRstUVwx-yz9876543210AA", "AbCdEf0123456789_ghIJklMNopQRstUVwx"),
            ("remote: https://x-access-token:ghs_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r.git", "ghs_16C7e42F292c6912E7710c838347Ae178B4a"),
            ("git clone https://ghp_R2d2C3poR2d2C3poR2d2C3poR2d2C3po12@github.com/o/r", "R2d2C3poR2d2C3poR2d2C3poR2d2C3po12"),
            ("token used: gho_16C7e42F292c6912E7710c838347Ae178B4a (oauth)", "16C7e42F292c6912E7710c838347Ae178B4a"),
            ("GH_PAT=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS", "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
            ("slack webhook bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
            ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
            ("[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            ("creds from STS: ASIAY34FZKBOKMUTVV7A expires soon", "Y34FZKBOKMUTVV7A"),
            ("const maps = load('AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q');", "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
            ("Stripe.api_key = 'sk_live_51HxYzAbCdEfGhIjKlMnOpQr'", "51HxYzAbCdEfGhIjKlMnOpQr"),
            ("restricted rk_live_4eC39HqLyjWDarjtT1zdp7dc in logs", "4eC39HqLyjWDarjtT1zdp7dc"),
            ("cookie session=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
            ("curl -H 'Authorization: Bearer abc.DEF-ghi_123' https://api.example.com", "abc.DEF-ghi_123"),
            ("> GET / HTTP/1.1\n> Authorization: Basic dXNlcjpwYXNzd29yZA==\n", "dXNlcjpwYXNzd29yZA=="),
            ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naI0YdV0NbdwO1ab0mH7Ym9i2vpm6Ptj2oqH2fe5BoU3Dl7SHB1cQpiJDRfU8Tz6c\n-----END RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn"),
            ("key file:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n[output truncated]", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
            ("DB_PASSWORD=hunter2-Correct-Horse\nDB_HOST=localhost", "hunter2-Correct-Horse"),
            ("{\"apiKey\": \"f81d4fae7dec11d0a76500a0c91e6bf6\", \"model\": \"x\"}", "f81d4fae7dec11d0a76500a0c91e6bf6"),
            ("config.yaml:\n  client_secret: 'Qm9vbXRvd24gU2VjcmV0IQ'\n", "Qm9vbXRvd24gU2VjcmV0IQ"),
            ("JWT_SECRET=\"s3cr3t-value-for-signing\"", "s3cr3t-value-for-signing"),
            ("DATABASE_URL=postgres://app:Sup3rS3cret@db.internal:5432/app", "Sup3rS3cret"),
            ("$ mytool --password=Pa55w0rd! --verbose", "Pa55w0rd!"),
            ("headers: {\"X-Api-Key\": \"a1b2c3d4e5f6\"}", "a1b2c3d4e5f6"),
            ("let accessToken = \"ya29.a0AfH6SMBx3d-EXAMPLE\";", "ya29.a0AfH6SMBx3d-EXAMPLE"),
            ("passwd: letmein2024", "letmein2024"),
            ("{\\\"refresh_token\\\": \\\"1//0gEXAMPLEtoken\\\"}", "1//0gEXAMPLEtoken"),
        ];
        cases
            .into_iter()
            .map(|(t, s)| (t.to_string(), s.to_string()))
            .collect()
    }

    #[test]
    fn secrets_are_redacted() {
        let all = secrets();
        assert!(all.len() >= 20);
        for (text, secret) in &all {
            let r = redact(text);
            assert!(!r.contains(secret.as_str()), "leaked {secret:?} in {r:?}");
            assert!(r.contains(REDACTED), "{r:?}");
            assert_eq!(redact(&r), r, "not idempotent: {r:?}");
        }
    }

    #[test]
    fn names_are_kept() {
        assert_eq!(redact("DB_PASSWORD=hunter2x"), "DB_PASSWORD=[REDACTED]");
        assert_eq!(redact("PASSWORD=correcthorse"), "PASSWORD=[REDACTED]");
        assert_eq!(redact("password: Hunter2024"), "password: [REDACTED]");
        assert_eq!(
            redact(r#"{"apiKey": "abcd1234efgh"}"#),
            r#"{"apiKey": "[REDACTED]"}"#
        );
        assert_eq!(
            redact("Authorization: Bearer abcdefgh"),
            "Authorization: Bearer [REDACTED]"
        );
        assert_eq!(
            redact("export OPENAI_API_KEY=sk-abc123DEF456ghi789JKL012"),
            "export OPENAI_API_KEY=sk-[REDACTED]"
        );
        assert_eq!(
            redact("-----BEGIN PRIVATE KEY-----\nMIIB1234\n-----END PRIVATE KEY-----"),
            "-----BEGIN PRIVATE KEY-----\n[REDACTED]\n-----END PRIVATE KEY-----"
        );
        assert_eq!(
            redact("postgres://app:pw1234@db/app"),
            "postgres://app:[REDACTED]@db/app"
        );
    }

    #[test]
    fn near_misses_are_untouched() {
        let texts = [
            "The token budget is 8000 tokens; the tokenizer counts chars/4.",
            "keyboard = 3",
            "let monkey = 12;",
            "max_tokens = 4096",
            "MAX_TOKENS=4096",
            "\"inputTokens\": 1200, \"totalTokens\": 1500",
            "commit 3f2a9c1e8b7d6f5a4c3b2a1908f7e6d5c4b3a291",
            "request id 550e8400-e29b-41d4-a716-446655440000",
            "She is risk-averse and task-oriented.",
            "sk-the-quick-brown-fox-jumps-over-it",
            "let token = self.token.clone();",
            "const apiKey = process.env.OPENAI_API_KEY;",
            "api_key = os.environ[\"API_KEY\"]",
            "password: ${DB_PASSWORD}",
            "Authorization: Bearer $TOKEN",
            "curl -H \"Authorization: Bearer ${GITHUB_TOKEN}\"",
            "if token == expected { return; }",
            "The key: it must be sorted.",
            "PASSWORD=[REDACTED]",
            "Look up the primary key = id in the table",
            "fn parse_token(input: &str) -> Token",
            "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
            "the bearer of bad news",
            "use_keychain: true",
            "hotkey=ctrl",
            "https://example.com/path:8080@foo",
            "pub api_key: String,",
            "    token: Option<String>,",
            "password: Vec<u8>,",
            "let secret_key = SecretKey::from_bytes(&bytes);",
        ];
        for t in texts {
            let r = redact(t);
            assert!(matches!(r, Cow::Borrowed(_)), "changed {t:?} to {r:?}");
        }
    }

    #[test]
    fn disabled_config_passes_through() {
        let on = RedactionConfig::default();
        assert!(on.enabled);
        let off = RedactionConfig::disabled();
        assert_eq!(off.apply("DB_PASSWORD=hunter2x"), "DB_PASSWORD=hunter2x");
        assert_eq!(on.apply("DB_PASSWORD=hunter2x"), "DB_PASSWORD=[REDACTED]");
    }

    #[test]
    fn secret_names() {
        for n in [
            "API_KEY",
            "apiKey",
            "x-api-key",
            "db_password",
            "accessToken",
            "apikey",
            "AUTHTOKEN",
            "SECRET",
            "client_secret",
            "passwd",
            "\"password\"",
            "secretKey",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in [
            "keyboard",
            "monkey",
            "max_tokens",
            "MAX_TOKENS",
            "tokenizer",
            "turkey",
            "keys",
            "passwords_policy_doc_x",
        ] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn fragment() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("API_KEY".to_string()),
                Just("password".to_string()),
                Just("token".to_string()),
                Just("Authorization: Bearer ".to_string()),
                Just("-----BEGIN RSA PRIVATE KEY-----".to_string()),
                Just("-----END RSA PRIVATE KEY-----".to_string()),
                Just("sk-".to_string()),
                Just("ghp_".to_string()),
                Just("AKIA".to_string()),
                Just("://u:".to_string()),
                Just("[REDACTED]".to_string()),
                "[=:\"' \n@\\\\]{1,3}",
                "[A-Za-z0-9_/+.-]{1,40}",
                ".{0,10}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(500))]
            #[test]
            fn idempotent_and_total(parts in prop::collection::vec(fragment(), 0..12)) {
                let text = parts.concat();
                let once = redact(&text).into_owned();
                let twice = redact(&once).into_owned();
                prop_assert_eq!(&once, &twice, "input {:?}", text);
            }
        }
    }

    #[test]
    fn allow_and_deny_patterns() {
        let config: RedactionConfig = serde_json::from_value(json!({
            "allow": ["^sk_test_"],
            "deny": ["\\bacme-[0-9a-f]{8}\\b"]
        }))
        .expect("valid patterns");
        assert!(config.enabled, "enabled stays the default");
        let text = "STRIPE=sk_test_4eC39HqLyjWDarjtT1zdp7dc internal acme-1f2e3d4c key";
        assert_eq!(
            config.apply(text),
            "STRIPE=sk_test_4eC39HqLyjWDarjtT1zdp7dc internal [REDACTED] key"
        );
        // Without the allow pattern the test key is redacted like any other.
        assert_eq!(
            RedactionConfig::default().apply(text),
            "STRIPE=sk_test_[REDACTED] internal acme-1f2e3d4c key"
        );
        // Idempotent with patterns too.
        let once = config.apply(text).into_owned();
        assert_eq!(config.apply(&once), once);
        let bad = serde_json::from_value::<RedactionConfig>(json!({"deny": ["ok", "(unclosed"]}))
            .expect_err("a bad pattern is refused");
        assert!(
            bad.to_string()
                .contains("invalid pattern [1] \"(unclosed\""),
            "{bad}"
        );
    }

    #[test]
    fn issue_examples_are_untouched() {
        for t in [
            "result.apiKey = args[++i]",
            "const apiKey = options?.apiKey",
            "{ key: \"upvotes\" }",
            "\"requesterSessionKey\": \"agent:main:main\"",
            "api_key = \"YOUR_API_KEY\"",
            "ANTHROPIC_API_KEY=sk-ant-...",
        ] {
            let r = redact(t);
            assert!(matches!(r, Cow::Borrowed(_)), "changed {t:?} to {r:?}");
        }
    }

    #[test]
    fn name_heads() {
        for n in [
            "requesterSessionKey",
            "PGPASSWORD",
            "DB_PASS",
            "password_confirmation",
            "SecretAccessKey",
            "secret_key_base",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in [
            "sort_key",
            "nextPageToken",
            "password_hash",
            "passwordPolicy",
            "publicKey",
            "eos_token",
            "api_key_env",
            "pass",
            "secretName",
            "keyId",
        ] {
            assert!(!is_secret_name(n), "{n}");
        }
    }
}
