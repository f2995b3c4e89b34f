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
//! The shape rules are in [`rules`], the judgement of a value in [`values`], and of a key's name
//! in [`names`].
//!
//! The name is kept and only the value becomes `[REDACTED]`, so a summary still says *which* key
//! was set. `[redaction] allow` patterns spare values the rules would redact; `deny` patterns
//! redact whatever they match. Redaction is idempotent: redacting twice equals redacting once.

mod names;
mod rules;
#[cfg(test)]
mod tests;
mod values;

use std::borrow::Cow;

use regex::{Captures, Regex};

use names::is_secret_name;
use rules::*;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use values::*;

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
