//! The redaction rules' cases.

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
