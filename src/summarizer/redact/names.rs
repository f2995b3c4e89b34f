//! Whether a key's name is secret-named: its head word is a secret word (`API_KEY`,
//! `client_secret`), and no qualifier makes it harmless (`sort_key`, `max_tokens`,
//! `password_hash`).

/// The words a secret-named key ends with (its head word).
pub(super) const SECRET_WORDS: [&str; 10] = [
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
pub(super) const HARMLESS_QUALIFIERS: [&str; 52] = [
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
pub(super) const VALUE_SUFFIXES: [&str; 10] = [
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
pub(super) const FUSED: [&str; 22] = [
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
pub(super) fn name_parts(name: &str) -> Vec<String> {
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
pub(super) fn is_secret_name(name: &str) -> bool {
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
