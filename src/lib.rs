//! compactd: LLM context compaction for Pi-format coding-agent sessions.
//!
//! Module map, in layers (each imports only the layers before it; `ARCHITECTURE.md` follows
//! one compaction through them):
//! - [`json`]: JavaScript-compatible JSON (UTF-16 lengths, `JSON.stringify` order and numbers;
//!   parts of a line nested past 100 levels kept as their `JSON.stringify` text, `json::deep`).
//! - [`accounting`]: beyond Pi, what compactions cost and save — prices, costs, the economics of
//!   a compaction due now, calibrated estimates (plain arithmetic, below the session model).
//! - [`prose`]: what people wrote in a message — its lines outside fenced code blocks (shared
//!   by the extractive summarizer and the handoff check).
//! - [`handoff`]: beyond Pi, a verified handoff — what a summary owes the agent that resumes
//!   the work (obligations, each with its source entry, from the facts the extractive
//!   summarizer reads), the check that scores any summary against them, and the repair section
//!   of what it missed (pure text; below the session model, like `accounting`).
//! - [`pi_version`]: which Pi's rules apply to a session (0.85.0 or 1.6.0; a setting, since
//!   the files of both say `version: 3`).
//! - [`estimate`]: Pi's token estimate of one message and the usage a reply reports — the
//!   primitives the session reader and the compaction core share.
//! - [`session`]: Pi session files in memory — entries as facts read in one borrowed pass plus
//!   their line (held bytes, or a span of the file read back on demand through the
//!   `LineSource` the storage shell provides), reader and migrations, tree and branch views,
//!   ids, stop reasons, and how the per-entry vectors of an open session grow (`session::room`).
//! - [`context`]: projection of a path to model context (`buildSessionContext`, `convertToLlm`).
//! - [`compaction`]: the pure core — tokens, the branch index (running totals along a path),
//!   cut points, preparation as plans of ranges, file ops, serialization, prompts, the reply
//!   types a summarizer returns, summaries and `CompactionResult`.
//! - [`clearing`]: beyond Pi, the second tier — old tool output cleared from the projected
//!   context (reversibly: a `compactd.clear` custom entry names what a pass cleared), the
//!   settings, the plan of a pass, the placeholder a cleared result projects to, and when a
//!   pass pays for the prompt-cache break it causes (`pays_back`, `CacheDebt`).
//! - [`live_context`]: incremental token facts of a live agent context (O(1) checks after appends).
//! - [`report`]: the analysis `compactd inspect` prints (the fixtures' `expected.json` shape).
//! - [`summarizer`]: who writes summaries — LLM providers (each only a streaming protocol),
//!   retries, overflow classifiers, redaction, the extractive default.
//! - [`store`]: the storage shell, the only module that knows where lines live — `Backend`,
//!   chosen once at start-up by `store::choose` (locate, open, create, list, the compaction
//!   lease, events between daemons, its own health for `doctor`), `SessionStorage`, one open
//!   session's lines, and `SessionRef`, the opaque name the layers above hold; the files backend
//!   (`store::files`: regular files only, other writers' appends, the shared lock, the allowed
//!   roots, repairs, durability, `FileLines`: entries' lines read back with positioned reads on
//!   the descriptor they were indexed from, and `store::files::confined`: no link followed on
//!   the way, appends checked on the descriptor written to, failed writes taken back) and
//!   PostgreSQL (`store::postgres`, the Cargo feature `postgres`: sessions shared by many
//!   daemons, on a connection pool).
//! - [`compactor`]: who writes summaries and the one place that asks them — the engine dispatch
//!   and the one provider call (a split turn's two calls in flight at once); `compactor::step`,
//!   the one summarization step every compaction summary takes (hooks, engine, retries, cost);
//!   branch summaries through the same dispatch. It reads and writes no session.
//! - [`rpc`]: the protocol surface — the one list of methods, params, results, event payloads,
//!   error codes, and the OpenRPC document generated from them.
//! - [`config`]: the one configuration struct (TOML, typed at parse time), engine selection and
//!   construction.
//! - [`daemon`]: open sessions shared by connections (each session's state behind the gate its
//!   writers pass, `gate`: no synchronous lock held across an awaited write), the method handlers, Pi's compaction
//!   lifecycle (one compaction runner) and its pure automatic decision, events, hooks, settings
//!   files, tree navigation, the beyond-Pi lanes (speculative compaction, pins, undo/edit, the
//!   thrash breaker, history recall, spend), when a speculation starts (`speculation_lead`:
//!   each summarizer's measured latency against the context's growth), and each session's
//!   compaction activity as its events announced it (for `listSessions`' status).
//! - [`transport`]: framing, typed wire messages, the per-connection loop, the dispatch table
//!   generated from the method list, stdio and Unix-socket listeners.
//! - [`cli`]: the command-line front end (`serve`, `stdio`, `connect`, `start`, `status`,
//!   `stop`, `doctor`, `service`, `pi` (the Pi extension and the MCP server put into Pi),
//!   `mcp`, `inspect`, `compact`, `preview` (these two always
//!   through a daemon: the one that holds the file, else one of their own process), and `top`, a live terminal view that is a client of the
//!   daemon's socket: a pure view model, the connection shell, ratatui and plain-text
//!   renderers), logging, and starting or joining the one daemon of a socket.
//! - [`mcp`]: the MCP server of `compactd mcp`, the recall tools backed by the daemon.
//! - [`cpu`]: CPU-heavy work run without stalling the async workers.
//! - [`descriptors`]: the process's budget of file descriptors (raised to the hard limit at
//!   start-up; running out is an error naming the limit).
pub mod accounting;
pub mod clearing;
pub mod cli;
pub mod compaction;
pub mod compactor;
pub mod config;
pub mod context;
pub mod cpu;
pub mod daemon;
pub mod descriptors;
pub mod estimate;
pub mod handoff;
pub mod json;
pub mod live_context;
pub mod mcp;
pub mod pi_version;
pub mod prose;
pub mod report;
pub mod rpc;
pub mod session;
pub mod store;
pub mod summarizer;
/// Test inputs and the skip-or-fail rule, shared with the integration suites.
#[cfg(test)]
pub(crate) mod test_fixtures;
/// What `test_fixtures` names its recordings' versions by (its includer provides it).
#[cfg(test)]
use pi_version::PiVersion;
pub mod transport;
