//! What a call is: a tool call or command classified by its tool and arguments, and whether
//! a later call is the same command again (a re-run that can fix a failure).

use serde_json::Value;

use super::super::text::*;
use super::*;

/// How a tool call reads: Pi's file tools by name; shell-like tools by their arguments
/// (`command`, `cmd` or `script`, whatever the tool is called: `bash`, `exec`, `shell`,
/// `run_terminal_cmd`, `execute_command`); other file tools by a path argument and a verb in
/// the name (`read_file`, `write_to_file`, `replace_in_file`); everything else generically.
pub(in super::super) fn classify_call(name: &str, args: Option<&Value>) -> ActionKind {
    let arg = |k: &str| {
        args.and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .filter(|v| !v.trim().is_empty())
    };
    let path = [
        "path",
        "file_path",
        "filePath",
        "file",
        "target_file",
        "filename",
    ]
    .iter()
    .find_map(|k| arg(k));
    if let (Some(p), "read" | "write" | "edit") = (path, name) {
        return ActionKind::FileOp {
            tool: name.to_string(),
            path: p.to_string(),
        };
    }
    let lower = name.to_ascii_lowercase();
    if let Some(p) = path {
        let verb = if lower.contains("str_replace") {
            match arg("command") {
                Some("view") => Some("read"),
                Some("create") => Some("write"),
                _ => Some("edit"),
            }
        } else if ["edit", "replace", "patch", "insert"]
            .iter()
            .any(|v| lower.contains(v))
        {
            Some("edit")
        } else if ["write", "create", "save"]
            .iter()
            .any(|v| lower.contains(v))
        {
            Some("write")
        } else if ["read", "view", "open", "cat"]
            .iter()
            .any(|v| lower.contains(v))
        {
            Some("read")
        } else {
            None
        };
        if let Some(tool) = verb {
            return ActionKind::FileOp {
                tool: tool.to_string(),
                path: p.to_string(),
            };
        }
    }
    let command = ["command", "cmd", "script"].iter().find_map(|k| {
        match args.and_then(|a| a.get(*k)) {
            Some(Value::String(c)) if !c.trim().is_empty() => Some(c.clone()),
            // `["bash", "-lc", "cargo test"]`
            Some(Value::Array(parts)) if !parts.is_empty() => {
                let words: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
                (words.len() == parts.len()).then(|| words.join(" "))
            }
            _ => None,
        }
    });
    if let Some(c) = command {
        return ActionKind::Command(c);
    }
    ActionKind::Tool(name.to_string(), key_argument(args))
}

/// The argument that says what a generic tool call was about: a well-known key if present,
/// else the first short string or number.
pub(in super::super) fn key_argument(args: Option<&Value>) -> Option<String> {
    let obj = args?.as_object()?;
    const KEYS: [&str; 12] = [
        "title",
        "query",
        "name",
        "url",
        "repo",
        "issue_number",
        "id",
        "pattern",
        "q",
        "topic",
        "owner",
        "team",
    ];
    let show = |k: &str, v: &Value| match v {
        Value::String(s) if !s.trim().is_empty() => Some(format!("{k}: {}", first_line(s, 80))),
        Value::Number(n) => Some(format!("{k}: {n}")),
        _ => None,
    };
    KEYS.iter()
        .find_map(|k| obj.get(*k).and_then(|v| show(k, v)))
        .or_else(|| obj.iter().find_map(|(k, v)| show(k, v)))
}

/// Whether two actions are the same thing tried again.
pub(in super::super) fn same_action(later: &ActionKind, failed: &ActionKind) -> bool {
    match (later, failed) {
        (ActionKind::Command(a), ActionKind::Command(b)) => same_command(a.trim(), b.trim()),
        (ActionKind::Tool(a, ka), ActionKind::Tool(b, kb)) => a == b && ka == kb,
        (a, b) => a == b,
    }
}

/// Exactly the same action again (a re-run that can supersede an error: a command extended
/// with more arguments may not run the part that failed).
pub(in super::super) fn exactly_same_action(later: &ActionKind, failed: &ActionKind) -> bool {
    match (later, failed) {
        (ActionKind::Command(a), ActionKind::Command(b)) => a.trim() == b.trim(),
        (a, b) => a == b,
    }
}

/// The error text of a carried-over item: what follows the first `: ` after its first
/// inline-code span (`` `cmd` failed (exit code 1): error… ``, `` Fix the failure of `cmd`: … ``).
pub(in super::super) fn carried_error(item: &str) -> Option<&str> {
    let after_code = item.splitn(3, '`').nth(2)?;
    let (_, rest) = after_code
        .split_once(": ")
        .or_else(|| after_code.split_once(":\n"))?;
    let rest = rest.trim().trim_end_matches('…').trim();
    (!rest.is_empty()).then_some(rest)
}

/// The same command, or one extends the other word for word (`docker build . && docker run
/// img` is settled by `docker build . && docker run img --version`).
pub(in super::super) fn same_command(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long == short
        || long
            .strip_prefix(short)
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
}

/// Distinctive words naming a failure: error codes from its output, and the words of its
/// command or tool that are not generic runners (`npm`, `cargo`, `run`, flags).
pub(in super::super) fn failure_words(kind: &ActionKind, text: &str) -> Vec<String> {
    const GENERIC: [&str; 34] = [
        "npm", "npx", "pnpm", "yarn", "bun", "run", "exec", "cargo", "python", "python3", "go",
        "make", "sudo", "bash", "sh", "cd", "git", "docker", "test", "tests", "build", "node",
        "env", "time", "uv", "poetry", "pip", "with", "then", "true", "false", "echo", "cat",
        "grep",
    ];
    let mut words: Vec<String> = ERROR_CODE_RE
        .find_iter(text)
        .map(|m| m.as_str().to_lowercase())
        .collect();
    let source = match kind {
        ActionKind::Command(c) => c.as_str(),
        ActionKind::Tool(name, _) => name.as_str(),
        ActionKind::FileOp { path, .. } => path.as_str(),
        ActionKind::AssistantError => "",
    };
    for w in source
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | ';' | '&' | '(' | ')' | '\'' | '"'))
    {
        let w = w.trim_matches(|c: char| matches!(c, ',' | ':' | '`'));
        let lower = w.to_lowercase();
        if w.chars().count() >= 4
            && !w.starts_with('-')
            && !w.contains("://")
            && !w.contains('=')
            && !GENERIC.contains(&lower.as_str())
        {
            words.push(lower);
        }
    }
    words.sort();
    words.dedup();
    words
}

/// `word` occurs in `lower` (already lowercased) not as part of a longer word.
pub(in super::super) fn mentions(lower: &str, word: &str) -> bool {
    let mut from = 0;
    while let Some(pos) = lower.get(from..).and_then(|s| s.find(word)) {
        let start = from + pos;
        let end = start + word.len();
        let before = lower[..start].chars().last();
        let after = lower[end..].chars().next();
        let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
        if edge(before) && edge(after) {
            return true;
        }
        from = start + 1;
        while !lower.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}

/// The part of a command line that does the work, as a summary would name it: the first part
/// of a chain or pipeline that verifies (a test, a build, a check), else the first that is no
/// `cd`, `export`, `source` or `set`; without redirections. `cd app && cargo test 2>&1 | tail`
/// is `cargo test`.
pub(in super::super) fn command_key(command: &str) -> String {
    let parts: Vec<&str> = command_parts(command)
        .into_iter()
        .map(str::trim)
        .filter(|p| {
            let first = p.split_whitespace().next().unwrap_or("");
            !p.is_empty() && !matches!(first, "cd" | "export" | "source" | "set" | ".")
        })
        .collect();
    let main = parts
        .iter()
        .find(|p| is_verification(p))
        .or(parts.first())
        .copied()
        .unwrap_or(command.trim());
    main.split_whitespace()
        .take_while(|w| !w.contains('>') && !w.starts_with('<'))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a command verifies the work: runs tests, a build, a type check or a linter
/// (`cargo test`, `npm run build`, `pytest`, `go vet`, `make check`, `tsc`, …).
pub(in super::super) fn is_verification(command: &str) -> bool {
    static VERIFY_RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(concat!(
            r"^(?:\w+=\S*\s+)*(?:",
            r"cargo\s+(?:\+\S+\s+)?(?:test|build|check|clippy|nextest|bench)",
            r"|(?:npm|pnpm|yarn|bun)\s+(?:test|t|build|run\s+(?:test|build|lint|check|typecheck|type-check|e2e)\S*|lint|typecheck)",
            r"|npx\s+(?:jest|vitest|tsc|eslint|playwright|mocha)",
            r"|(?:python3?\s+-m\s+)?(?:pytest|tox|nox|mypy|ruff\s+check|flake8|pylint|unittest)",
            r"|go\s+(?:test|build|vet)",
            r"|make(?:\s+(?:test|tests|check|build|all|lint))?",
            r"|tsc|jest|vitest|eslint|mocha|rspec|phpunit|ctest",
            r"|(?:mvn|\./mvnw)\s+\S*(?:test|verify|package|install)",
            r"|(?:gradle|\./gradlew)\s+\S*(?:test|build|check)",
            r"|dotnet\s+(?:test|build)|cmake\s+--build|bazel\s+(?:test|build)",
            r"|bundle\s+exec\s+(?:rspec|rake\s+test)|mix\s+test|swift\s+(?:test|build)|deno\s+test",
            r"|terraform\s+(?:validate|plan)",
            r")\b",
        ))
        .expect("verification pattern is valid")
    });
    VERIFY_RE.is_match(command.trim())
}

/// Whether a command that exited 0 hid a failure: a pipeline ending in a filter (`… 2>&1 |
/// tail -20`) reports the filter's status, so tests that failed look like a success. Its
/// output then shows the failure (`--- FAIL:`, `test result: FAILED`, `3 failed`, `error:`,
/// a traceback).
pub(in super::super) fn hidden_failure(command: &str, output: &str) -> bool {
    static FAILED_RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?m)^\s*(?:--- FAIL:|FAIL\b|FAILED\b|test result: FAILED|error(?:\[\w+\])?:|npm ERR!|Traceback \(most recent call last\)|\d+ (?:failed|failing)\b|=+ \d+ failed)",
        )
        .expect("failure output pattern is valid")
    });
    const FILTERS: [&str; 9] = [
        "tail", "head", "grep", "less", "tee", "cat", "sed", "awk", "cut",
    ];
    let Some((_, last)) = command.rsplit_once('|') else {
        return false;
    };
    let filter = last
        .split_whitespace()
        .next()
        .is_some_and(|w| FILTERS.contains(&w));
    filter && !last.contains("||") && FAILED_RE.is_match(output)
}
