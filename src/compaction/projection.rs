//! Pi 1.6's session projection (`buildSessionProjection`) and what Pi 1.6 computes from it: the
//! context's messages with edits applied, their estimate (`estimateProjectedContextTokens`), the
//! replayed system message (pi-ai's `getCurrentSystemMessage`) and the cut point
//! (`findProjectedCutPoint`).
//!
//! What 1.6 changed about the context, and why it is a projection: an entry no longer simply
//! becomes its message. A `context_edit` hides (`replacement: null`) or replaces the content of an
//! earlier message from then on, the latest edit per target winning; a compaction contributes
//! its `systemMessage` checkpoint before its summary; system-role messages inside a compaction's
//! kept range are dropped (the checkpoint replays them); an older compaction inside the kept range
//! contributes nothing. Every 1.6 algorithm works on that projection, as an ordered list of
//! context entries each projecting zero, one or (the newest compaction) two messages.
//!
//! Pure, and cheap to build: token estimates and usage come from the entries' facts; only the
//! few entries whose message changed (edited targets, system messages, the checkpoint) are
//! parsed. Messages are materialized only when a caller asks for them.

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::cut_point::CutPoint;
use super::tokens::{estimate_context_tokens, ContextEstimate, MessageFacts};
use crate::context::project_entry;
use crate::estimate::{estimate_message, system_message_tokens};
use crate::session::{Entry, EntryKind, PathEntries, PiVersion, Role};

/// One context entry of the projection: a path position and what it projects to.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectedEntry {
    /// Position of the source entry in the path.
    pub pos: usize,
    pub part: Part,
}

/// What a context entry projects to.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Nothing: metadata, an omitted message, an older compaction, an edit.
    Nothing,
    /// The entry's own message, its content replaced when `edit` (the edit's path position) says
    /// so.
    Message(MessagePart),
    /// The newest compaction: its `systemMessage` checkpoint when it has one, then its summary.
    Compaction {
        checkpoint_tokens: Option<u64>,
        summary_tokens: u64,
    },
}

/// A projected message's facts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MessagePart {
    pub role: Role,
    /// Pi 1.6's `estimateTokens` of the message as projected.
    pub tokens: u64,
    /// The reply's valid usage (an edit keeps it: only the content is replaced).
    pub usage: Option<f64>,
    /// Path position of the `context_edit` that replaced the content.
    pub edit: Option<usize>,
}

impl Part {
    /// How many messages this part projects.
    pub fn count(&self) -> usize {
        match self {
            Part::Nothing => 0,
            Part::Message(_) => 1,
            Part::Compaction {
                checkpoint_tokens, ..
            } => 1 + usize::from(checkpoint_tokens.is_some()),
        }
    }

    /// The estimate of every message of this part.
    pub fn tokens(&self) -> u64 {
        match self {
            Part::Nothing => 0,
            Part::Message(m) => m.tokens,
            Part::Compaction {
                checkpoint_tokens,
                summary_tokens,
            } => checkpoint_tokens.unwrap_or(0) + summary_tokens,
        }
    }

    /// Facts of each message of this part, in order, with whether it is a system message.
    pub fn message_facts(&self) -> Vec<(MessageFacts, bool)> {
        let plain = |tokens| MessageFacts {
            tokens,
            usage_tokens: None,
        };
        match self {
            Part::Nothing => Vec::new(),
            Part::Message(m) => vec![(
                MessageFacts {
                    tokens: m.tokens,
                    usage_tokens: m.usage,
                },
                m.role == Role::System,
            )],
            Part::Compaction {
                checkpoint_tokens,
                summary_tokens,
            } => checkpoint_tokens
                .map(|t| (plain(t), true))
                .into_iter()
                .chain(std::iter::once((plain(*summary_tokens), false)))
                .collect(),
        }
    }

    /// Whether the part projects a message a cut may start at (`isCutPointMessage`): user,
    /// assistant, bashExecution, custom or a summary; never a tool result or a system message.
    fn is_cut_point(&self) -> bool {
        matches!(
            self,
            Part::Message(MessagePart {
                role: Role::User
                    | Role::Assistant
                    | Role::BashExecution
                    | Role::Custom
                    | Role::BranchSummary
                    | Role::CompactionSummary,
                ..
            })
        )
    }

    /// Whether the part projects a message that starts a turn (`isTurnStartMessage`).
    fn is_turn_start(&self) -> bool {
        self.is_cut_point() && !matches!(self, Part::Message(m) if m.role == Role::Assistant)
    }
}

/// An edit the projection applies: the latest `context_edit` of its target among the context
/// entries.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedEdit {
    /// Path position of the edit entry.
    pub edit_pos: usize,
    pub target_id: String,
    /// `replacement: null`: the target is left out of the context.
    pub omit: bool,
    /// Whether the target is one of the context entries.
    pub target_in_context: bool,
}

/// Pi 1.6's projection of one path.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// The context entries, in context order (`buildContextEntries`).
    pub entries: Vec<ProjectedEntry>,
    /// The edits applied, one per target, ordered by each target's first edit.
    pub edits: Vec<AppliedEdit>,
}

/// Whether entry `e` is a system-role message (which 1.6 drops from a compaction's kept range).
fn is_system_message(e: &Entry) -> bool {
    e.kind == EntryKind::Message && e.role == Some(Role::System)
}

/// Pi 1.6's `buildContextEntries` as path positions: the newest compaction, its kept entries
/// before it (system messages left out), then everything after it.
pub fn context_positions<P: PathEntries + ?Sized>(path: &P) -> Vec<usize> {
    crate::context::context_positions_keeping(path, |e| !is_system_message(e))
}

/// The content an edit replaces its target's with, as the target's role receives it (a string
/// becomes one text block for an assistant message or a tool result; `Some(None)`: the
/// replacement has no content, so the message has none); `None` when the role's messages are
/// never edited (bash executions, summaries, system messages).
fn replaced_content(role: Role, replacement: &Value) -> Option<Option<Value>> {
    let content = replacement.get("content").cloned();
    match role {
        Role::Assistant | Role::ToolResult => Some(content.map(|c| match c {
            Value::String(s) => serde_json::json!([{ "type": "text", "text": s }]),
            other => other,
        })),
        Role::User | Role::Custom => Some(content),
        _ => None,
    }
}

impl Projection {
    /// `buildSessionProjection` of `path`.
    pub fn build<P: PathEntries + ?Sized>(path: &P) -> Projection {
        let positions = context_positions(path);
        // The latest edit per target among the context entries, in first-edit order.
        let mut latest: IndexMap<&str, usize> = IndexMap::new();
        for &pos in &positions {
            let e = path.at(pos);
            if e.kind == EntryKind::ContextEdit {
                if let Some(target) = e.str_field("targetId") {
                    latest.insert(target, pos);
                }
            }
        }
        let in_context = |id: &str| {
            positions
                .iter()
                .any(|&p| path.at(p).id.as_deref() == Some(id))
        };
        let edits = latest
            .iter()
            .map(|(target, &edit_pos)| AppliedEdit {
                edit_pos,
                target_id: (*target).to_owned(),
                omit: path
                    .at(edit_pos)
                    .get("replacement")
                    .is_none_or(Value::is_null),
                target_in_context: in_context(target),
            })
            .collect();
        let entries = positions
            .iter()
            .enumerate()
            .map(|(k, &pos)| {
                let e = path.at(pos);
                let edit = e.id.as_deref().and_then(|id| latest.get(id).copied());
                ProjectedEntry {
                    pos,
                    part: part_of(e, k == 0, edit.map(|p| (p, path.at(p)))),
                }
            })
            .collect();
        Projection { entries, edits }
    }

    /// Every projected message's facts and whether it is a system message, in context order.
    fn message_facts(&self) -> Vec<(MessageFacts, bool)> {
        self.entries
            .iter()
            .flat_map(|e| e.part.message_facts())
            .collect()
    }

    /// `estimateTokens` of each projected message, in context order.
    pub fn message_tokens(&self) -> Vec<u64> {
        self.message_facts().iter().map(|(f, _)| f.tokens).collect()
    }

    /// Pi's `estimateContextTokens` over the projected messages (what the fixtures call
    /// `estimateUnprojected`: the 0.85 function on the 1.6 messages).
    pub fn unprojected_estimate(&self) -> ContextEstimate {
        estimate_context_tokens(self.message_facts().into_iter().map(|(f, _)| f))
    }

    /// `estimateProjectedContextTokens(projection, branch)`: the last usage plus what follows
    /// it, when that usage was recorded after the latest `context_edit` or compaction on the
    /// path; otherwise the replayed system message once plus every other message's estimate.
    /// `current_system_tokens` is the estimate of [`Projection::current_system_message`] (the
    /// caller has parsed it, or knows there is none).
    pub fn estimate<P: PathEntries + ?Sized>(
        &self,
        path: &P,
        current_system_tokens: u64,
    ) -> ContextEstimate {
        let facts = self.message_facts();
        let estimate = estimate_context_tokens(facts.iter().map(|(f, _)| *f));
        if let Some(index) = estimate.last_usage_index {
            if let Some(usage_pos) = self.position_of_message(index) {
                let id = path.at(usage_pos).id.as_deref();
                let usage_at = (0..path.path_len())
                    .find(|&i| id.is_some() && path.at(i).id.as_deref() == id)
                    .unwrap_or(usage_pos);
                let invalidated_at = (0..path.path_len()).rev().find(|&i| {
                    matches!(
                        path.at(i).kind,
                        EntryKind::ContextEdit | EntryKind::Compaction
                    )
                });
                if invalidated_at.is_none_or(|at| usage_at > at) {
                    return estimate;
                }
            }
        }
        let tokens = current_system_tokens
            + facts
                .iter()
                .filter(|(_, system)| !system)
                .map(|(f, _)| f.tokens)
                .sum::<u64>();
        ContextEstimate {
            tokens: tokens as f64,
            usage_tokens: 0.0,
            trailing_tokens: tokens,
            last_usage_index: None,
        }
    }

    /// Path position of the entry that projects the `index`-th message.
    pub fn position_of_message(&self, index: usize) -> Option<usize> {
        let mut seen = 0;
        for e in &self.entries {
            seen += e.part.count();
            if index < seen {
                return Some(e.pos);
            }
        }
        None
    }

    /// The source entry id of each projected message, in order (the compaction's id for its
    /// checkpoint and summary).
    pub fn message_entry_ids<P: PathEntries + ?Sized>(&self, path: &P) -> Vec<Option<String>> {
        self.entries
            .iter()
            .flat_map(|e| std::iter::repeat_n(path.at(e.pos).id_owned(), e.part.count()))
            .collect()
    }

    /// The projected messages as Pi 1.6 builds them (`buildSessionProjection().messages`),
    /// parsed from the entries now.
    pub fn messages<P: PathEntries + ?Sized>(&self, path: &P) -> Vec<Value> {
        self.entries
            .iter()
            .flat_map(|e| materialize(path, e))
            .collect()
    }

    /// The messages the `i`-th projected entry contributes, parsed now.
    pub fn messages_of<P: PathEntries + ?Sized>(&self, path: &P, i: usize) -> Vec<Value> {
        self.entries
            .get(i)
            .map_or_else(Vec::new, |e| materialize(path, e))
    }

    /// pi-ai's `getCurrentSystemMessage` over the projected messages: every system message
    /// replayed into one (content appended, sections patched, tools added and removed), or
    /// `None` when there is none.
    pub fn current_system_message<P: PathEntries + ?Sized>(&self, path: &P) -> Option<Value> {
        let systems: Vec<Value> = self
            .entries
            .iter()
            .filter(|e| match &e.part {
                Part::Message(m) => m.role == Role::System,
                Part::Compaction {
                    checkpoint_tokens, ..
                } => checkpoint_tokens.is_some(),
                Part::Nothing => false,
            })
            .flat_map(|e| materialize(path, e))
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .collect();
        replay_system_messages(&systems)
    }

    /// Index into [`Projection::entries`] of the newest compaction (its summary projected):
    /// `prepareCompaction`'s previous compaction.
    pub fn newest_compaction(&self) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| matches!(e.part, Part::Compaction { .. }))
    }

    /// `findProjectedCutPoint(entries, start, end, keepRecentTokens)`; indices are into
    /// [`Projection::entries`]. 1.6 differs from 0.85's walk in three places: the budget is
    /// counted on the projected messages (edits applied, system messages counted), a budget
    /// first reached inside trailing tool results keeps their call (the last cut point) rather
    /// than everything, and a suffix made only of an omitted recovery attempt moves the cut one
    /// entry on.
    pub fn cut_point<P: PathEntries + ?Sized>(
        &self,
        path: &P,
        start: usize,
        end: usize,
        keep_recent_tokens: i64,
    ) -> CutPoint {
        let entries = &self.entries;
        let end = end.min(entries.len());
        let cut_points: Vec<usize> = (start..end)
            .filter(|&i| entries[i].part.is_cut_point())
            .collect();
        let Some(&first) = cut_points.first() else {
            return CutPoint {
                first_kept_entry_index: start,
                turn_start_index: None,
                is_split_turn: false,
            };
        };
        let mut cut = first;
        let mut acc: i64 = 0;
        let mut exceeded = false;
        for i in (start..end).rev() {
            let t = entries[i].part.tokens() as i64;
            if t == 0 {
                continue;
            }
            acc += t;
            if acc >= keep_recent_tokens {
                exceeded = true;
                cut = cut_points
                    .iter()
                    .copied()
                    .find(|&c| c >= i)
                    .or(cut_points.last().copied())
                    .unwrap_or(first);
                break;
            }
        }
        if exceeded && self.is_recovery_omission_suffix(path, cut + 1, end) {
            cut += 1;
        }
        while cut > start {
            let prev = &entries[cut - 1];
            if path.at(prev.pos).kind == EntryKind::Compaction || prev.part.count() > 0 {
                break;
            }
            cut -= 1;
        }
        let starts_turn = entries[cut].part.is_turn_start();
        let turn_start_index = if starts_turn {
            None
        } else {
            (start..=cut)
                .rev()
                .find(|&i| entries[i].part.is_turn_start())
        };
        CutPoint {
            first_kept_entry_index: cut,
            turn_start_index,
            is_split_turn: !starts_turn && turn_start_index.is_some(),
        }
    }

    /// Whether the projected entries `from..end` are only a recovery attempt that was edited out
    /// (Pi writes an omitting `context_edit` when it recovers from an error, an overflow or a
    /// length stop): an omitted assistant message among them, every other entry invisible to the
    /// context by nature or omitted too, no compaction, and no edit that replaces something
    /// outside them. Such a suffix holds nothing a model saw, so the cut may move past it.
    fn is_recovery_omission_suffix<P: PathEntries + ?Sized>(
        &self,
        path: &P,
        from: usize,
        end: usize,
    ) -> bool {
        let suffix = &self.entries[from.min(end)..end];
        let visible = |e: &ProjectedEntry| {
            let src = path.at(e.pos);
            src.kind != EntryKind::ContextEdit && src.role.is_some()
        };
        let omitted = |e: &ProjectedEntry| visible(e) && e.part.count() == 0;
        let omitted_ids: Vec<Option<&str>> = suffix
            .iter()
            .filter(|e| omitted(e))
            .map(|e| path.at(e.pos).id.as_deref())
            .collect();
        let external_replacement = suffix.iter().any(|e| {
            let src = path.at(e.pos);
            src.kind == EntryKind::ContextEdit
                && src.get("replacement").is_some_and(|r| !r.is_null())
                && !omitted_ids.contains(&src.str_field("targetId"))
        });
        !external_replacement
            && suffix
                .iter()
                .any(|e| omitted(e) && path.at(e.pos).is_message(Role::Assistant))
            && suffix.iter().all(|e| {
                path.at(e.pos).kind != EntryKind::Compaction && (!visible(e) || omitted(e))
            })
    }
}

/// What entry `e` projects to: `newest` is whether it leads the context (the only compaction
/// that contributes), `edit` its latest edit (position and entry), if any.
fn part_of(e: &Entry, newest: bool, edit: Option<(usize, &Entry)>) -> Part {
    if e.kind == EntryKind::Compaction {
        if !newest {
            return Part::Nothing;
        }
        let checkpoint_tokens = e
            .get("systemMessage")
            .filter(|m| crate::json::truthy(Some(m)))
            .map(|m| m.as_object().map_or(0, message_tokens_1_6));
        return Part::Compaction {
            checkpoint_tokens,
            summary_tokens: e.tokens,
        };
    }
    let Some(role) = e.role else {
        return Part::Nothing;
    };
    let own_tokens = || e.system_tokens().unwrap_or(e.tokens);
    let usage = e.usage_tokens();
    match edit {
        None => Part::Message(MessagePart {
            role,
            tokens: own_tokens(),
            usage,
            edit: None,
        }),
        Some((edit_pos, edit)) => match edit.get("replacement").filter(|r| !r.is_null()) {
            None => Part::Nothing,
            Some(replacement) => {
                let tokens = match replaced_content(role, replacement) {
                    Some(content) => {
                        let mut m = Map::new();
                        m.insert("role".into(), Value::from(role.as_str()));
                        if let Some(c) = content {
                            m.insert("content".into(), c);
                        }
                        estimate_message(&m)
                    }
                    None => own_tokens(),
                };
                Part::Message(MessagePart {
                    role,
                    tokens,
                    usage,
                    edit: Some(edit_pos),
                })
            }
        },
    }
}

/// Pi 1.6's `estimateTokens` of a message object.
fn message_tokens_1_6(m: &Map<String, Value>) -> u64 {
    crate::estimate::estimate_message_in(m, PiVersion::V1_6)
}

/// A system message as `sessionEntryToContextMessages` gives it: `content: ""` for a missing or
/// null content.
fn normalized_system(mut m: Map<String, Value>) -> Map<String, Value> {
    if matches!(m.get("content"), None | Some(Value::Null)) {
        m.insert("content".into(), Value::from(""));
    }
    m
}

/// The messages one projected entry contributes, parsed now.
fn materialize<P: PathEntries + ?Sized>(path: &P, pe: &ProjectedEntry) -> Vec<Value> {
    let e = path.at(pe.pos);
    match &pe.part {
        Part::Nothing => Vec::new(),
        Part::Compaction {
            checkpoint_tokens, ..
        } => {
            let mut out = Vec::new();
            if checkpoint_tokens.is_some() {
                out.extend(e.get("systemMessage").cloned());
            }
            out.extend(project_entry(e));
            out
        }
        Part::Message(m) => {
            let Some(mut message) = project_entry(e) else {
                return Vec::new();
            };
            if m.role == Role::System {
                if let Value::Object(o) = message {
                    message = Value::Object(normalized_system(o));
                }
            }
            match m.edit {
                Some(edit_pos) => edited(message, m.role, path.at(edit_pos))
                    .into_iter()
                    .collect(),
                None => vec![message],
            }
        }
    }
}

/// `projectContextEntry(entry, edit)` of one projected message: `None` when the edit omits it,
/// else the message with the edit's replacement content (for the roles an edit reaches).
pub fn edited(mut message: Value, role: Role, edit: &Entry) -> Option<Value> {
    let replacement = edit.get("replacement").filter(|r| !r.is_null())?;
    if let (Some(content), Some(o)) = (replaced_content(role, replacement), message.as_object_mut())
    {
        match content {
            Some(c) => o.insert("content".into(), c),
            None => o.remove("content"),
        };
    }
    Some(message)
}

/// pi-ai's `getCurrentSystemMessage` over system messages, in order: later content appended to
/// the base prompt, sections patched by name (`null` removes one), tools resolved (a removal,
/// then the additions, each by name); the first message's timestamp. `None` when there is no
/// system message with a timestamp and no tool.
pub fn replay_system_messages(systems: &[Value]) -> Option<Value> {
    let mut content: Vec<String> = Vec::new();
    let mut sections: IndexMap<String, Value> = IndexMap::new();
    let mut tools: IndexMap<String, Value> = IndexMap::new();
    let mut timestamp: Option<Value> = None;
    for m in systems {
        if timestamp.as_ref().is_none_or(Value::is_null) {
            timestamp = m.get("timestamp").cloned();
        }
        let text = super::serialize::content_text(m.get("content"), "\n");
        if !text.is_empty() {
            content.push(text);
        }
        if let Some(Value::Object(patch)) = m.get("sections") {
            for (name, value) in patch {
                if value.is_null() {
                    sections.shift_remove(name);
                } else {
                    sections.insert(name.clone(), value.clone());
                }
            }
        }
        for removed in m
            .get("toolsRemoved")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = tool_name(removed) {
                tools.shift_remove(&name);
            }
        }
        for added in m
            .get("toolsAdded")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = tool_name(added) {
                tools.insert(name, added.clone());
            }
        }
    }
    let timestamp = timestamp.filter(|t| !t.is_null());
    if timestamp.is_none() && tools.is_empty() {
        return None;
    }
    let mut out = Map::new();
    out.insert("role".into(), Value::from("system"));
    out.insert("content".into(), Value::from(content.join("\n\n")));
    if !sections.is_empty() {
        out.insert(
            "sections".into(),
            Value::Object(sections.into_iter().collect()),
        );
    }
    if !tools.is_empty() {
        out.insert(
            "toolsAdded".into(),
            Value::Array(tools.into_values().collect()),
        );
    }
    out.insert("timestamp".into(), timestamp.unwrap_or(Value::from(0)));
    Some(Value::Object(out))
}

/// A tool's `name` as a JavaScript `Map` key would take it.
fn tool_name(tool: &Value) -> Option<String> {
    match tool.get("name") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(other) => Some(crate::json::stringify(other)),
    }
}

/// The estimate of the replayed system message, when there is one.
pub fn system_tokens(system: Option<&Value>) -> u64 {
    system
        .and_then(Value::as_object)
        .map_or(0, system_message_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(v: Value) -> Entry {
        Entry::from_value(v)
    }

    fn msg(id: &str, parent: Option<&str>, m: Value) -> Entry {
        entry(
            json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:00.000Z","message":m}),
        )
    }

    #[test]
    fn the_latest_edit_per_target_wins_and_omits_or_replaces() {
        let entries = [
            msg(
                "u1",
                None,
                json!({"role":"user","content":"x".repeat(40),"timestamp":1}),
            ),
            msg(
                "a1",
                Some("u1"),
                json!({"role":"assistant","content":[{"type":"text","text":"y".repeat(80)}],"timestamp":2}),
            ),
            entry(
                json!({"type":"context_edit","id":"e1","parentId":"a1","timestamp":"2026-01-01T00:00:00.000Z","targetId":"a1","replacement":null}),
            ),
            entry(
                json!({"type":"context_edit","id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:00.000Z","targetId":"a1","replacement":{"content":"short"}}),
            ),
            entry(
                json!({"type":"context_edit","id":"e3","parentId":"e2","timestamp":"2026-01-01T00:00:00.000Z","targetId":"u1","replacement":null}),
            ),
        ];
        let path: Vec<&Entry> = entries.iter().collect();
        let p = Projection::build(&path);
        let messages = p.messages(&path);
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(
            messages[0]["content"],
            json!([{"type":"text","text":"short"}])
        );
        assert_eq!(p.message_tokens(), vec![2]);
        let kinds: Vec<(&str, bool)> = p
            .edits
            .iter()
            .map(|e| (e.target_id.as_str(), e.omit))
            .collect();
        assert_eq!(kinds, [("a1", false), ("u1", true)]);
    }

    #[test]
    fn system_messages_replay_into_one_and_count_once_without_usage() {
        let entries = [
            msg(
                "s1",
                None,
                json!({"role":"system","content":"base","sections":{"a":"1111"},"toolsAdded":[{"name":"read"}],"timestamp":5}),
            ),
            msg(
                "s2",
                Some("s1"),
                json!({"role":"system","content":"","sections":{"a":null,"b":"22"},"toolsRemoved":[{"name":"read"}],"toolsAdded":[{"name":"bash"}],"timestamp":6}),
            ),
            msg(
                "u1",
                Some("s2"),
                json!({"role":"user","content":"hello","timestamp":7}),
            ),
        ];
        let path: Vec<&Entry> = entries.iter().collect();
        let p = Projection::build(&path);
        let system = p.current_system_message(&path).expect("a system message");
        assert_eq!(
            system,
            json!({"role":"system","content":"base","sections":{"b":"22"},"toolsAdded":[{"name":"bash"}],"timestamp":5})
        );
        let current = system_tokens(Some(&system));
        let e = p.estimate(&path, current);
        assert_eq!(e.last_usage_index, None);
        assert_eq!(
            e.tokens as u64,
            current + 2,
            "the replayed system once, then the user"
        );
    }
}
