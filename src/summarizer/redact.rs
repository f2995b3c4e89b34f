//! Secret hygiene for summarizer input and output (beyond Pi).
//!
//! Coding sessions are full of credentials: `.env` files the agent read, `curl` commands with
//! `Authorization` headers, keys pasted by the user. Compaction sends that history to a
//! summarization provider (possibly a different one from the agent's) and writes the summary
//! back into the session, where it is replayed on every later turn. Redacting obvious secrets
//! before either happens keeps a compaction from spreading a key further than the session
//! already did.
//!
//! The rules aim at *obvious* secrets with few false positives: well-known provider token
//! formats, `Authorization` header values, PEM private-key blocks, URL passwords, and
//! assignments whose name is a secret-ish word (`API_KEY=…`, `"password": "…"`). The name is
//! kept and only the value becomes `[REDACTED]`, so a summary still says *which* key was set.
//! Redaction is idempotent: redacting twice gives the same text as redacting once.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Whether secrets are redacted before text reaches a provider. On by default: a user has to
/// opt out of hygiene, not into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RedactionConfig {
    pub enabled: bool,
}

impl Default for RedactionConfig {
    fn default() -> Self {
        RedactionConfig { enabled: true }
    }
}

impl RedactionConfig {
    /// [`redact`] when enabled, the text untouched otherwise.
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.enabled {
            redact(text)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// [`redact_value`] when enabled.
    pub fn apply_value(&self, v: &mut Value) {
        if self.enabled {
            redact_value(v);
        }
    }
}

/// PEM private-key blocks; the second alternative catches a block cut off by truncated output.
static PEM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)(-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----)(?:(.*?)(-----END ([A-Z0-9]+ )*PRIVATE KEY-----)|((?:[A-Za-z0-9+/=\s]|\\n)*))",
    )
    .expect("PEM pattern is valid")
});

/// Passwords inside URLs (`postgres://user:pass@host`).
static URL_CREDS_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")
        .expect("URL pattern is valid")
});

/// Provider token formats. Group 1 is a recognizable prefix that is kept; group 2 the secret.
static TOKEN_RES: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // Anthropic, OpenAI (project, service-account, admin and legacy keys).
        r"\b(sk-(?:ant-(?:api|admin)\d\d-|ant-|proj-|svcacct-|admin-|None-)?)([A-Za-z0-9_-]{20,})",
        // GitHub classic and fine-grained tokens.
        r"\b(gh[pousr]_)([A-Za-z0-9]{30,})\b",
        r"\b(github_pat_)([A-Za-z0-9_]{40,})",
        // Slack.
        r"\b(xox[abposr]-)([A-Za-z0-9-]{10,})",
        // AWS access key ids.
        r"\b(AKIA|ASIA)([A-Z0-9]{16})\b",
        // Google API keys.
        r"\b(AIza)([0-9A-Za-z_-]{35})",
        // Stripe secret and restricted keys.
        r"\b((?:sk|rk)_(?:live|test)_)([0-9A-Za-z]{16,})",
        // JWTs (header.payload.signature, both base64url JSON objects).
        r"\b()(eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
        // A bare bearer token (the header form is handled with its name below).
        r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)",
    ]
    .iter()
    .map(|p| Regex::new(p).expect("token pattern is valid"))
    .collect()
});

/// `Authorization: Bearer …` / `Basic …` header values, any length.
static AUTH_HEADER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:bearer|basic|token|digest)\s+)([A-Za-z0-9._~+/=-]+)"#,
    )
    .expect("auth header pattern is valid")
});

/// `name <sep> value` where the name contains a secret-ish word (checked precisely by
/// [`is_secret_name`]). The value is a quoted string (also JSON-escaped quotes) or a bare word.
static ASSIGN_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)([A-Za-z0-9_.-]*(?:secret|token|key|passwd|password)[A-Za-z0-9_.-]*)((?:\\?["'])?\s*(?::=|=>|[:=])\s*)(\\"[^"\\\n]*\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"'`,;&)\]}>]+)"#,
    )
    .expect("assignment pattern is valid")
});

/// Replaces obvious secrets in `text` with `[REDACTED]`, keeping names and recognizable
/// prefixes. Returns `Cow::Borrowed` when nothing was found (the common case costs no copy).
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out: Cow<str> = Cow::Borrowed(text);

    out = apply(out, &PEM_RE, |c| {
        let header = c.get(1).map_or("", |m| m.as_str());
        let whole = c.get(0).map_or("", |m| m.as_str());
        let body = c.get(3).or_else(|| c.get(6)).map_or("", |m| m.as_str());
        if body.replace("\\n", "").trim().is_empty() || body.trim() == REDACTED {
            return whole.to_string();
        }
        match c.get(4) {
            Some(end) => format!("{header}\n{REDACTED}\n{}", end.as_str()),
            None if body.ends_with('\n') => format!("{header}\n{REDACTED}\n"),
            None => format!("{header}\n{REDACTED}"),
        }
    });
    out = apply(out, &URL_CREDS_RE, |c| {
        let pass = c.get(2).map_or("", |m| m.as_str());
        if pass == REDACTED || pass.starts_with('$') || pass.starts_with('<') {
            return c.get(0).map_or("", |m| m.as_str()).to_string();
        }
        format!(
            "{}{REDACTED}{}",
            c.get(1).map_or("", |m| m.as_str()),
            c.get(3).map_or("", |m| m.as_str())
        )
    });
    for re in TOKEN_RES.iter() {
        out = apply(out, re, |c| {
            let secret = c.get(2).map_or("", |m| m.as_str());
            let prefix = c.get(1).map_or("", |m| m.as_str());
            // Real tokens are random: they contain digits. This spares prose like
            // "sk-the-quick-brown-fox-jumps".
            if !secret.bytes().any(|b| b.is_ascii_digit()) {
                return c.get(0).map_or("", |m| m.as_str()).to_string();
            }
            format!("{prefix}{REDACTED}")
        });
    }
    out = apply(out, &AUTH_HEADER_RE, |c| {
        format!("{}{REDACTED}", c.get(1).map_or("", |m| m.as_str()))
    });
    out = apply(out, &ASSIGN_RE, |c| {
        let whole = c.get(0).map_or("", |m| m.as_str());
        let name = c.get(1).map_or("", |m| m.as_str());
        let sep = c.get(2).map_or("", |m| m.as_str());
        let value = c.get(3).map_or("", |m| m.as_str());
        if !is_secret_name(name) {
            return whole.to_string();
        }
        // `NAME=value` in env style is configuration, never code: redact even a plain word.
        let env_style = sep == "="
            && name.bytes().any(|b| b.is_ascii_uppercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        match redact_assigned(value, env_style) {
            Some(v) => format!("{name}{sep}{v}"),
            None => whole.to_string(),
        }
    });

    match out {
        Cow::Owned(s) if s == text => Cow::Borrowed(text),
        other => other,
    }
}

/// Runs one rule, keeping the text borrowed while nothing matches.
fn apply<'a>(text: Cow<'a, str>, re: &Regex, f: impl Fn(&Captures) -> String) -> Cow<'a, str> {
    if !re.is_match(&text) {
        return text;
    }
    Cow::Owned(re.replace_all(&text, |c: &Captures| f(c)).into_owned())
}

/// The redacted form of an assigned value (quotes kept), or `None` when the value is not a
/// secret: empty or short, a reference (`$VAR`, `${…}`, `<placeholder>`, `process.env…`),
/// code (`getToken()`, `self.token`, a type), a literal (`true`, `42`) or already redacted.
/// `env_style` values are judged like quoted ones (configuration, not code).
fn redact_assigned(value: &str, env_style: bool) -> Option<String> {
    let (open, inner, close) = if let Some(i) = value
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
    };
    if !is_secret_value(inner, !open.is_empty() || env_style) {
        return None;
    }
    Some(format!("{open}{REDACTED}{close}"))
}

/// Whether `inner` (an assigned value without quotes) looks like a secret.
fn is_secret_value(inner: &str, quoted: bool) -> bool {
    let v = inner.trim();
    if v.chars().count() < 4 || v.contains("[REDACTED") {
        return false;
    }
    let lower = v.to_ascii_lowercase();
    let reference = [
        "$",
        "<",
        "{{",
        "%",
        "process.env",
        "os.environ",
        "env::",
        "env.",
    ]
    .iter()
    .any(|p| lower.starts_with(p));
    let masked = v.chars().all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '•'));
    if reference || masked {
        return false;
    }
    // Keys, tokens and generated passwords have no spaces or escape sequences; a quoted
    // value with them is prose or code (`token = "module\tclient"`).
    if v.contains(char::is_whitespace) || v.contains('\\') {
        return false;
    }
    if quoted {
        return true;
    }
    let literal = matches!(
        lower.as_str(),
        "true" | "false" | "null" | "none" | "undefined" | "nil" | "required" | "optional"
    );
    let short_number = v.len() <= 5 && v.bytes().all(|b| b.is_ascii_digit());
    // Bare lowercase identifiers and paths read as code (`token = self.token`), not secrets.
    // Bare identifiers, paths and types read as code (`token = self.token`,
    // `api_key: Option<String>`), not secrets.
    let identifier = v
        .bytes()
        .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.' || b == b':');
    let code = v.contains('(')
        || v.contains('<')
        || v.contains("::")
        || v.starts_with('=')
        || v.starts_with('[')
        || v.starts_with('{');
    !(literal || short_number || identifier || code)
}

/// Secret-ish words; a name must contain one as a whole word part.
const SECRET_WORDS: [&str; 5] = ["secret", "token", "key", "passwd", "password"];

/// Whether `name` (a variable, key or header name) names a secret: it contains one of
/// [`SECRET_WORDS`] as a whole part, delimited by the name's ends, by a non-alphanumeric
/// character, or by a camelCase boundary. So `API_KEY`, `apiKey`, `x-api-key`, `db_password`
/// and `accessToken` qualify, while `keyboard`, `monkey`, `max_tokens` and `tokenizer` do not.
/// Fused compounds such as `apikey` and `authtoken` qualify by their suffix.
fn is_secret_name(name: &str) -> bool {
    let name = name.trim_matches(|c: char| c == '"' || c == '\'' || c == '\\');
    let bytes = name.as_bytes();
    let lower = name.to_ascii_lowercase();
    for word in SECRET_WORDS {
        let mut from = 0;
        while let Some(pos) = lower.get(from..).and_then(|s| s.find(word)) {
            let start = from + pos;
            let end = start + word.len();
            from = start + 1;
            let starts = start == 0 || {
                let prev = bytes[start - 1];
                !prev.is_ascii_alphanumeric()
                    || (bytes[start].is_ascii_uppercase() && !prev.is_ascii_uppercase())
                    || fused_prefix(&lower[..start])
            };
            let ends = end == bytes.len() || {
                let next = bytes[end];
                !next.is_ascii_alphanumeric()
                    || (next.is_ascii_uppercase() && !bytes[end - 1].is_ascii_uppercase())
            };
            if starts && ends {
                return true;
            }
        }
    }
    false
}

/// Words that commonly fuse with a secret word without a separator (`apikey`, `authtoken`):
/// `before` (the lowercased name up to the secret word) ends with one of them as a whole part.
fn fused_prefix(before: &str) -> bool {
    const FUSED: [&str; 9] = [
        "api", "auth", "access", "secret", "private", "refresh", "session", "client", "master",
    ];
    FUSED.iter().any(|w| {
        before.strip_suffix(w).is_some_and(|rest| {
            rest.bytes()
                .last()
                .is_none_or(|b| !b.is_ascii_alphanumeric())
        })
    })
}

/// Redacts every string inside a JSON value, in place. A string stored under a secret-named
/// key (`{"apiKey": "…"}`) is redacted whole, since its name is not part of the string.
pub fn redact_value(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if let Value::String(s) = child {
                    if is_secret_name(key) && is_secret_value(s, true) {
                        *s = REDACTED.to_string();
                        continue;
                    }
                }
                redact_value(child);
            }
        }
        _ => {}
    }
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
        let off = RedactionConfig { enabled: false };
        assert_eq!(off.apply("DB_PASSWORD=hunter2x"), "DB_PASSWORD=hunter2x");
        assert_eq!(on.apply("DB_PASSWORD=hunter2x"), "DB_PASSWORD=[REDACTED]");
    }

    #[test]
    fn redact_value_nested() {
        let mut v = json!({
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Set OPENAI_API_KEY=sk-abc123DEF456ghi789JKL012 then run"},
                {"type": "toolCall", "id": "c1", "name": "bash",
                 "arguments": {"command": "curl -H 'Authorization: Bearer tok_9f8e7d6c5b4a' x",
                               "env": {"password": "hunter2", "user": "admin", "retries": 3}}}
            ],
            "usage": {"totalTokens": 12, "keys": ["AKIAIOSFODNN7EXAMPLE", null, true]}
        });
        redact_value(&mut v);
        let s = v.to_string();
        for leaked in [
            "sk-abc123",
            "tok_9f8e7d6c5b4a",
            "hunter2",
            "IOSFODNN7EXAMPLE",
        ] {
            assert!(!s.contains(leaked), "{leaked} in {s}");
        }
        assert_eq!(v["content"][1]["arguments"]["env"]["user"], "admin");
        assert_eq!(v["content"][1]["arguments"]["env"]["retries"], 3);
        assert_eq!(v["usage"]["totalTokens"], 12);
        let once = v.clone();
        redact_value(&mut v);
        assert_eq!(v, once);
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
}
