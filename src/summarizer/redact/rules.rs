//! The shape rules: the regular expressions that find candidate secrets (token formats,
//! private keys, credentials in URLs, `Authorization` headers, secret-named assignments and
//! flags).

use std::sync::LazyLock;

use regex::Regex;

/// PEM private-key blocks (also with JSON-escaped `\n`); the second alternative catches a block
/// cut off by truncated output.
pub(super) static PEM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)(-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)(?:(.*?)(-----END ([A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)|((?:[A-Za-z0-9+/=\s]|\\n)*))",
    )
    .expect("PEM pattern is valid")
});

/// Passwords inside URLs (`postgres://user:pass@host`).
pub(super) static URL_CREDS_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)([^\s@/]+)(@)")
        .expect("URL pattern is valid")
});

/// Secret-bearing query parameters (`?access_token=…`, `&sig=…`).
pub(super) static URL_QUERY_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)([?&](?:access_token|token|api_key|apikey|key|sig|signature|client_secret|password|auth|x-amz-signature|x-amz-security-token)=)([^\s&#'\x22]+)",
    )
    .expect("query pattern is valid")
});

/// Token formats recognisable by shape alone. Group 1 is a prefix that is kept (it says what
/// kind of credential it was), group 2 the secret. `min_distinct` guards against placeholders
/// such as `ghp_xxxxxxxx`.
pub(super) struct TokenRule {
    pub(super) re: Regex,
    /// The secret must contain a digit (real tokens are random; prose is not).
    pub(super) needs_digit: bool,
}

pub(super) static TOKEN_RULES: LazyLock<Vec<TokenRule>> = LazyLock::new(|| {
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
pub(super) static AUTH_HEADER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:bearer|basic|token|digest)\s+)([A-Za-z0-9._~+/=-]+)"#,
    )
    .expect("auth header pattern is valid")
});

/// A bare bearer token (the header form is handled with its name above).
pub(super) static BEARER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)").expect("bearer pattern is valid")
});

/// `--password VALUE`, `--api-token VALUE`: a secret-named flag followed by its value.
pub(super) static FLAG_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(\s--?[A-Za-z][A-Za-z0-9-]*\s+)([^\s\x22'`;|&<>]+)")
        .expect("flag pattern is valid")
});

/// MySQL's `-pPASSWORD` (no space).
pub(super) static MYSQL_P_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(\bmysql(?:dump|admin)?\b[^\n]*?\s-p)([^\s\x22'`;|&<>]+)")
        .expect("mysql pattern is valid")
});

/// `name <sep> value` where the name contains a secret-ish word (judged precisely by
/// [`is_secret_name`]). The value is a quoted string (also JSON-escaped quotes) or a bare word.
pub(super) static ASSIGN_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)([A-Za-z0-9_.-]*(?:secret|token|key|passwd|password|pass|pwd|passphrase|credentials?)[A-Za-z0-9_.-]*)((?:\\?["'])?\s*(?::=|=>|[:=])\s*)(\\"[^"\\\n]*\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"'`,;&)\]}>]+)"#,
    )
    .expect("assignment pattern is valid")
});
