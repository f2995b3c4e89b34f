//! `compactd mcp`: an MCP server (stdio, the official Rust SDK) that gives a model the recall
//! tools of one Pi session — `search_history` and `get_entry` — so after a compaction it can
//! get back the exact text a summary condensed (a file it read, an error, the user's wording)
//! instead of re-running commands or guessing. No standard exists for this; MCP is how agents
//! take tools today.
//!
//! Backed by the daemon, not by reading the file here: the server starts or joins the daemon on
//! its socket (as `compactd connect` does) and calls `searchHistory` / `getEntry`. A session a
//! client holds open is shared, so the tools answer from the live session (what was appended a
//! moment ago, which entries the current context still has verbatim) and never race its writer;
//! a session nobody holds is read fresh from the file for each call. Each call opens the session
//! and releases it at once, so the server never keeps a file locked between calls.
//!
//! Results are bounded (at most [`MAX_HITS`] hits, snippets of ~160 characters, an entry's
//! text cut at [`MAX_ENTRY_CHARS`]) and provenance-tagged (entry id, timestamp, role, and whether
//! a summary replaced the entry). An unknown id is a tool error (`isError`), which the model
//! reads and can recover from, not a protocol error.

use std::path::{Path, PathBuf};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, Json, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::transport::client::{DaemonClient, Refusal};

/// Default and largest number of hits `search_history` returns.
pub const DEFAULT_HITS: u32 = 10;
pub const MAX_HITS: u32 = 50;
/// Characters of an entry's text `get_entry` returns at most.
pub const MAX_ENTRY_CHARS: usize = 20_000;

/// Which session the tools recall from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This session file.
    File(PathBuf),
    /// The most recent Pi session of this working directory, looked up at every call (a
    /// session Pi starts later is picked up).
    LatestOf(PathBuf),
}

/// The longest query `search_history` takes, in characters: a query is literal text, and a
/// longer one is no question a model asks (and would be echoed into its context on error).
pub const MAX_QUERY_CHARS: usize = 1000;
/// The longest entry id `get_entry` takes (Pi's ids are 8 hex digits; a client's own up to 64).
pub const MAX_ID_CHARS: usize = 64;
/// The most characters of a tool's error text (an echoed id or query is cut first).
pub const MAX_ERROR_CHARS: usize = 500;

/// `search_history`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Text to find (case-insensitive, literally: no pattern syntax) in any message, tool
    /// call, tool result or summary of the session, the parts a compaction replaced included.
    pub query: String,
    /// Most hits to return, most recent first (default 10, at most 50).
    #[serde(default, deserialize_with = "count")]
    #[schemars(schema_with = "count_schema")]
    pub limit: Option<u32>,
}

/// A count as MCP clients send it: a JSON integer, or the same digits as a string (the MCP
/// Inspector's CLI sends every argument as a string).
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Count {
        Number(u32),
        Text(String),
    }
    match Option::<Count>::deserialize(d)? {
        None => Ok(None),
        Some(Count::Number(n)) => Ok(Some(n)),
        Some(Count::Text(t)) => t.trim().parse().map(Some).map_err(|_| {
            serde::de::Error::custom(format!("expected a whole number, got {:?}", cut(&t, 20)))
        }),
    }
}

/// `limit`'s schema in standard JSON Schema: an integer in range, no `format` (schemars'
/// `uint32` is no JSON Schema format, and clients warn about it).
fn count_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["integer", "null"],
        "minimum": 1,
        "maximum": MAX_HITS,
        "description": "Most hits to return, most recent first (default 10, at most 50)."
    })
}

/// `get_entry`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EntryArgs {
    /// The entry's id, from a `search_history` hit or the id range a summary names.
    pub entry_id: String,
}

/// `text` cut to `max` characters, `…` marking the cut: what an error may echo of an input.
fn cut(text: &str, max: usize) -> String {
    match bounded(text, max) {
        (t, true) => format!("{t}…"),
        (t, false) => t,
    }
}

/// One hit, with where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// The entry's id (for `get_entry`).
    pub entry_id: String,
    /// When the entry was written (ISO 8601).
    pub timestamp: Option<String>,
    /// The message's role (`user`, `assistant`, `toolResult`, …), else the entry's type
    /// (`compaction`, `branch_summary`, …).
    pub role: String,
    /// The match with some context around it.
    pub snippet: String,
    /// A summary replaced this entry in the model's current context.
    pub compacted: bool,
    /// On the session's current branch (false: an abandoned branch).
    pub on_branch: bool,
}

/// `search_history`'s result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchResult {
    /// The session file searched.
    pub session: String,
    /// Hits, most recent first.
    pub hits: Vec<Hit>,
    /// More entries match than were returned (raise `limit` or narrow the query).
    pub more: bool,
}

/// `get_entry`'s result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryResult {
    pub entry_id: String,
    pub timestamp: Option<String>,
    /// The message's role, else the entry's type.
    pub role: String,
    /// The entry's type (`message`, `compaction`, `branch_summary`, `custom`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The entry's text: message text, tool calls and results, command output, summaries.
    pub text: String,
    /// `text` was cut at the limit; `totalChars` is the full length.
    pub truncated: bool,
    #[schemars(schema_with = "length_schema")]
    pub total_chars: usize,
}

/// A length in standard JSON Schema (no `format`: see [`count_schema`]).
fn length_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 0})
}

/// `text` cut to at most `max` characters (on a character boundary), and whether it was cut.
pub fn bounded(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        None => (text.to_owned(), false),
        Some((cut, _)) => (text[..cut].to_owned(), true),
    }
}

/// Pi's "continue most recent" for `cwd`: the `.jsonl` file with the newest mtime in the
/// session directory (`$PI_CODING_AGENT_SESSION_DIR`, else `<agentDir>/sessions/--<cwd>--/`)
/// whose first line is a session header.
pub fn latest_session(cwd: &Path) -> Result<PathBuf, String> {
    let cwd = std::path::absolute(cwd).map_err(|e| format!("{}: {e}", cwd.display()))?;
    let dir = match std::env::var_os("PI_CODING_AGENT_SESSION_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => crate::config::agent_dir()
            .join("sessions")
            .join(crate::session::dir_name_of_cwd(&cwd.to_string_lossy())),
    };
    latest_in(&dir).map_err(|e| format!("no Pi session for {}: {e}", cwd.display()))
}

/// The `.jsonl` file with a session header and the newest mtime in `dir`.
pub fn latest_in(dir: &Path) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("jsonl") {
            continue;
        }
        let Ok(modified) = e.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        if !has_session_header(&path) {
            continue;
        }
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, path));
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| format!("no Pi session file in {}", dir.display()))
}

/// Whether the file's first line (read up to 1 MiB, as Pi's discovery does) is a session header.
fn has_session_header(path: &Path) -> bool {
    use std::io::{BufRead, Read};
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut line = Vec::new();
    if std::io::BufReader::new(f.take(1 << 20))
        .read_until(b'\n', &mut line)
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<Value>(&line)
        .ok()
        .is_some_and(|v| v["type"] == "session" && v["id"].is_string())
}

/// The recall server: one per `compactd mcp` process.
#[derive(Clone)]
pub struct RecallServer {
    target: Target,
    socket: PathBuf,
    client: std::sync::Arc<Mutex<Option<DaemonClient>>>,
    tool_router: ToolRouter<Self>,
}

fn refusal_text(r: &Refusal) -> String {
    match r.kind() {
        Some("entry_not_found") => r.message.clone(),
        _ => format!("compactd refused: {r}"),
    }
}

#[tool_router(router = tool_router)]
impl RecallServer {
    pub fn new(target: Target, socket: PathBuf) -> RecallServer {
        RecallServer {
            target,
            socket,
            client: std::sync::Arc::new(Mutex::new(None)),
            tool_router: Self::tool_router(),
        }
    }

    /// The session file the tools read now.
    fn session_file(&self) -> Result<PathBuf, String> {
        match &self.target {
            Target::File(f) => Ok(f.clone()),
            Target::LatestOf(cwd) => latest_session(cwd),
        }
    }

    /// Runs `method` on the session: opens it (shared with whoever holds it), calls, releases.
    /// A lost daemon connection is re-established once.
    async fn on_session(&self, method: &str, params: Value) -> Result<(PathBuf, Value), String> {
        let file = self.session_file()?;
        for attempt in 0..2 {
            let mut guard = self.client.lock().await;
            if guard.is_none() {
                *guard = Some(DaemonClient::connect(&self.socket).await.map_err(|e| {
                    format!(
                        "compactd is not reachable on {}: {e}",
                        self.socket.display()
                    )
                })?);
            }
            let Some(client) = guard.as_ref() else {
                continue;
            };
            let opened = client.call("openSession", json!({ "path": file })).await;
            let sid = match opened {
                Ok(info) => info["sessionId"].as_str().unwrap_or_default().to_owned(),
                Err(r) if r.kind() == Some("io") && attempt == 0 => {
                    *guard = None;
                    continue;
                }
                Err(r) => return Err(format!("cannot open {}: {}", file.display(), r.message)),
            };
            let mut params = params.clone();
            params["sessionId"] = Value::from(sid.clone());
            let reply = client.call(method, params).await;
            let _ = client
                .call("closeSession", json!({ "sessionId": sid }))
                .await;
            return reply.map(|v| (file, v)).map_err(|r| refusal_text(&r));
        }
        Err(format!(
            "compactd is not reachable on {}",
            self.socket.display()
        ))
    }

    #[tool(
        name = "search_history",
        description = "Search this session's whole history, including the parts an earlier compaction replaced with a summary. Returns the most recent matching entries first, each with its entry id, timestamp and role and a short snippet around the match; read one in full with get_entry."
    )]
    async fn search_history(
        &self,
        Parameters(args): Parameters<SearchArgs>,
    ) -> Result<Json<SearchResult>, String> {
        if args.query.trim().is_empty() {
            return Err("query must not be empty".into());
        }
        let chars = args.query.chars().count();
        if chars > MAX_QUERY_CHARS {
            return Err(format!(
                "query is {chars} characters long; search for a distinctive part of it (at most {MAX_QUERY_CHARS} characters): {}",
                cut(&args.query, 40)
            ));
        }
        let limit = args.limit.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS);
        // One more than asked, to say whether there are more.
        let (file, hits) = self
            .on_session(
                "searchHistory",
                json!({ "query": args.query, "limit": limit + 1 }),
            )
            .await
            .map_err(|e| cut(&e, MAX_ERROR_CHARS))?;
        let mut hits: Vec<Hit> = hits
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|h| {
                Some(Hit {
                    entry_id: h["entryId"].as_str()?.to_owned(),
                    timestamp: h["timestamp"].as_str().map(str::to_owned),
                    role: h["role"].as_str().unwrap_or("unknown").to_owned(),
                    snippet: h["snippet"].as_str().unwrap_or_default().to_owned(),
                    compacted: h["compacted"].as_bool().unwrap_or(false),
                    on_branch: h["onBranch"].as_bool().unwrap_or(false),
                })
            })
            .collect();
        let more = hits.len() > limit as usize;
        hits.truncate(limit as usize);
        Ok(Json(SearchResult {
            session: file.display().to_string(),
            hits,
            more,
        }))
    }

    #[tool(
        name = "get_entry",
        description = "Return the full original text of one history entry by its id (from search_history, or from the id range a compaction summary names), with its timestamp and role. Long entries are cut at 20000 characters."
    )]
    async fn get_entry(
        &self,
        Parameters(args): Parameters<EntryArgs>,
    ) -> Result<Json<EntryResult>, String> {
        let chars = args.entry_id.chars().count();
        if chars > MAX_ID_CHARS {
            return Err(format!(
                "{} ({chars} characters) is no entry id: ids are at most {MAX_ID_CHARS} characters and come from search_history hits or a summary's id range",
                cut(&args.entry_id, 16)
            ));
        }
        let (_, entry) = self
            .on_session("getEntry", json!({ "entryId": args.entry_id }))
            .await
            .map_err(|e| {
                let e = cut(&e, MAX_ERROR_CHARS);
                if e.starts_with("Entry ") {
                    format!("{e}: no entry with this id in the session; ids come from search_history hits or a summary's id range")
                } else {
                    e
                }
            })?;
        let full = crate::daemon::history::entry_text(&entry);
        let total_chars = full.chars().count();
        let (text, truncated) = bounded(&full, MAX_ENTRY_CHARS);
        Ok(Json(EntryResult {
            entry_id: args.entry_id,
            timestamp: entry["timestamp"].as_str().map(str::to_owned),
            role: crate::daemon::history::entry_role(&entry),
            kind: entry["type"].as_str().unwrap_or("unknown").to_owned(),
            text,
            truncated,
            total_chars,
        }))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for RecallServer {
    fn get_info(&self) -> ServerConfig {
        let what = match &self.target {
            Target::File(f) => format!("the Pi session {}", f.display()),
            Target::LatestOf(cwd) => format!("the latest Pi session of {}", cwd.display()),
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("compactd", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Recall for {what}: its history is kept in full even where a compaction summary replaced it. Use search_history to find past messages, tool output or decisions, and get_entry to read one entry verbatim."
            ))
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn serve(target: Target, socket: PathBuf) -> Result<(), String> {
    let server = RecallServer::new(target, socket);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("MCP initialization failed: {e}"))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| format!("MCP server stopped: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_on_characters() {
        assert_eq!(bounded("héllo", 10), ("héllo".to_owned(), false));
        assert_eq!(bounded("héllo", 2), ("hé".to_owned(), true));
        assert_eq!(bounded("", 0), (String::new(), false));
    }

    #[test]
    fn the_latest_session_is_the_newest_file_with_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = dir.path().join("sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        let header = r#"{"type":"session","version":3,"id":"x","timestamp":"t","cwd":"/p"}"#;
        // Modification times set explicitly (oldest first), not waited for.
        let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let write = |name: &str, text: &str, mtime| {
            let path = sessions.join(name);
            std::fs::write(&path, text).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(at(mtime)).unwrap();
            path
        };
        write("a.jsonl", &format!("{header}\n"), 1_000);
        let new = write("b.jsonl", &format!("{header}\n"), 2_000);
        write("c.jsonl", "not a session\n", 3_000);
        write("d.txt", &format!("{header}\n"), 4_000);
        assert_eq!(latest_in(&sessions).unwrap(), new);
        assert!(latest_in(&dir.path().join("none")).is_err());
    }

    #[test]
    fn a_limit_is_a_number_or_its_digits_and_no_schema_has_a_format() {
        let args = |v: Value| serde_json::from_value::<SearchArgs>(v);
        let limit = |v: Value| args(v).map(|a| a.limit);
        assert_eq!(limit(json!({"query": "q", "limit": 2})).unwrap(), Some(2));
        assert_eq!(limit(json!({"query": "q", "limit": "2"})).unwrap(), Some(2));
        assert_eq!(limit(json!({"query": "q"})).unwrap(), None);
        assert_eq!(limit(json!({"query": "q", "limit": null})).unwrap(), None);
        let bad = limit(json!({"query": "q", "limit": "two"}))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("whole number"), "{bad}");
        assert!(limit(json!({"query": "q", "limit": -1})).is_err());
        let server = RecallServer::new(Target::File("/x.jsonl".into()), "/s".into());
        for t in server.tool_router.list_all() {
            let schemas = json!([&*t.input_schema, t.output_schema.as_deref()]).to_string();
            assert!(!schemas.contains("\"format\""), "{}: {schemas}", t.name);
        }
    }

    #[test]
    fn the_tools_have_input_and_output_schemas() {
        let server = RecallServer::new(Target::File("/x.jsonl".into()), "/s".into());
        let tools = server.tool_router.list_all();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names.len(), 2);
        for t in &tools {
            let input = serde_json::to_value(&*t.input_schema).unwrap();
            let output = serde_json::to_value(t.output_schema.as_deref()).unwrap();
            assert_eq!(output["type"], "object", "{}", t.name);
            match t.name.as_ref() {
                "search_history" => {
                    assert_eq!(input["required"], json!(["query"]));
                    assert!(output["properties"]["hits"].is_object());
                }
                "get_entry" => {
                    assert_eq!(input["required"], json!(["entryId"]));
                    assert!(output["properties"]["text"].is_object());
                }
                other => panic!("unexpected tool {other}"),
            }
        }
    }
}
