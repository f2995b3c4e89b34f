//! The incremental view of an agent context that a long-lived session keeps beside the pure
//! functions: per-message token facts plus running totals, so usage and threshold checks after
//! an append cost O(1) instead of a walk over the whole path.
//!
//! The pure [`estimate_context_tokens`](crate::compaction::tokens::estimate_context_tokens) stays
//! the definition; this type must always agree with it (a property test checks that) and is
//! rebuilt from the path whenever the context is rebuilt wholesale (open, compaction, tree
//! navigation).

use crate::compaction::tokens::{
    should_compact, CompactionSettings, ContextEstimate, MessageFacts,
};
use crate::context::context_entries;
use crate::estimate::PackedUsage;
use crate::session::Entry;

/// Token facts of the agent context, maintained incrementally.
#[derive(Debug, Clone, Default)]
pub struct LiveContext {
    facts: Vec<Kept>,
    /// Sum of all estimates.
    total: u64,
    /// Index and tokens of the last message with valid usage.
    last_usage: Option<(usize, f64)>,
    /// Sum of estimates after `last_usage` (or of everything when there is none).
    trailing: u64,
    /// What the estimate without usage adds to the sum of the messages (Pi 1.6 counts the
    /// replayed system message once rather than each system message: their difference).
    no_usage_adjust: i64,
}

/// One message's [`MessageFacts`] as kept: 16 bytes where `MessageFacts` takes 24 (its
/// `Option<f64>`). A session keeps one per message of its agent context, 72k for a 100 MB
/// session without a compaction.
#[derive(Debug, Clone, Copy)]
struct Kept {
    tokens: u64,
    usage: PackedUsage,
}

impl Kept {
    fn facts(self) -> MessageFacts {
        MessageFacts {
            tokens: self.tokens,
            usage_tokens: self.usage.get(),
        }
    }
}

/// The facts of the message `e` projects to, if it is one.
fn facts_of(e: &Entry) -> Option<MessageFacts> {
    e.role.is_some().then(|| MessageFacts {
        tokens: e.tokens,
        usage_tokens: e.usage_tokens(),
    })
}

/// The context of these messages, in order. Its memory is exactly what they take (a vector
/// grown by doubling holds up to twice that, for as long as the session is open).
impl FromIterator<MessageFacts> for LiveContext {
    fn from_iter<I: IntoIterator<Item = MessageFacts>>(messages: I) -> LiveContext {
        let messages = messages.into_iter();
        let mut live = LiveContext::default();
        live.facts.reserve_exact(messages.size_hint().0);
        messages.for_each(|f| live.push(f));
        live.facts.shrink_to_fit();
        live
    }
}

impl LiveContext {
    /// Builds the facts of `buildSessionContext(path)` without materializing messages.
    pub fn from_path(path: &[&Entry]) -> LiveContext {
        context_entries(path)
            .into_iter()
            .filter_map(facts_of)
            .collect()
    }

    /// Adds one message at the end of the context (an append at the leaf). O(1).
    pub fn push(&mut self, f: MessageFacts) {
        let idx = self.facts.len();
        crate::session::room::push(
            &mut self.facts,
            Kept {
                tokens: f.tokens,
                usage: PackedUsage::new(f.usage_tokens),
            },
        );
        self.total += f.tokens;
        match f.usage_tokens {
            Some(u) => {
                self.last_usage = Some((idx, u));
                self.trailing = 0;
            }
            None => self.trailing += f.tokens,
        }
    }

    /// Adds the message an appended entry projects to, if any.
    pub fn push_entry(&mut self, e: &Entry) {
        if let Some(f) = facts_of(e) {
            self.push(f);
        }
    }

    /// Removes the last message (overflow recovery drops the failed reply). O(n) only when the
    /// removed message carried the last usage, since the previous one must then be found.
    pub fn pop(&mut self) -> Option<MessageFacts> {
        let f = self.facts.pop()?.facts();
        self.total -= f.tokens;
        let idx = self.facts.len();
        match self.last_usage {
            Some((u, _)) if u == idx => {
                self.last_usage = self
                    .facts
                    .iter()
                    .enumerate()
                    .rev()
                    .find_map(|(i, m)| m.usage.get().map(|t| (i, t)));
                let start = self.last_usage.map_or(0, |(i, _)| i + 1);
                self.trailing = self.facts[start..].iter().map(|m| m.tokens).sum();
            }
            _ => self.trailing -= f.tokens,
        }
        Some(f)
    }

    /// Sets the estimate of the message at `pos` (a clearing pass replaced its content in the
    /// projection). O(1).
    pub fn set_tokens(&mut self, pos: usize, tokens: u64) {
        let Some(f) = self.facts.get_mut(pos) else {
            return;
        };
        let old = std::mem::replace(&mut f.tokens, tokens);
        self.total = self.total - old + tokens;
        if self.last_usage.is_none_or(|(u, _)| pos > u) {
            self.trailing = self.trailing - old + tokens;
        }
    }

    /// Drops the usage every message so far reported (a clearing pass made it stale: it counted
    /// outputs the projection no longer holds), so the estimate is the projection's own until a
    /// newer reply reports usage. O(n), once per pass.
    pub fn forget_usage(&mut self) {
        for f in &mut self.facts {
            f.usage = PackedUsage::NONE;
        }
        self.last_usage = None;
        self.trailing = self.total;
    }

    /// Sets what the estimate without usage adds to the messages' sum (see the field).
    pub fn set_no_usage_adjustment(&mut self, adjust: i64) {
        self.no_usage_adjust = adjust;
    }

    pub fn len(&self) -> usize {
        self.facts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }

    /// Sum of the per-message estimates (Pi's `estimatedTokensAfter` after a compaction).
    pub fn estimated_total(&self) -> u64 {
        self.total
    }

    /// `estimateContextTokens` of the context. O(1).
    pub fn estimate(&self) -> ContextEstimate {
        match self.last_usage {
            Some((idx, usage)) => ContextEstimate {
                tokens: usage + self.trailing as f64,
                usage_tokens: usage,
                trailing_tokens: self.trailing,
                last_usage_index: Some(idx),
            },
            None => {
                let tokens = (self.total as i64 + self.no_usage_adjust).max(0) as u64;
                ContextEstimate {
                    tokens: tokens as f64,
                    usage_tokens: 0.0,
                    trailing_tokens: tokens,
                    last_usage_index: None,
                }
            }
        }
    }

    /// `shouldCompact` on the current estimate. O(1).
    pub fn should_compact(&self, context_window: i64, settings: &CompactionSettings) -> bool {
        should_compact(self.estimate().tokens, context_window, settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::tokens::estimate_context_tokens;
    use proptest::prelude::*;

    fn facts() -> impl Strategy<Value = MessageFacts> {
        (0u64..5000, prop::option::of(1u64..200_000)).prop_map(|(tokens, u)| MessageFacts {
            tokens,
            usage_tokens: u.map(|x| x as f64),
        })
    }

    proptest! {
        /// Pushes, pops, and (beyond Pi) clearing passes: a message shrunk to its placeholder
        /// and every usage so far dropped; the incremental figures always equal the pure
        /// function over the same facts.
        #[test]
        fn incremental_estimate_matches_the_pure_function(
            ops in prop::collection::vec((facts(), 0u8..10, any::<prop::sample::Index>()), 0..200)
        ) {
            let mut live = LiveContext::default();
            let mut reference: Vec<MessageFacts> = Vec::new();
            for (f, op, at) in ops {
                match op {
                    0..=2 => prop_assert_eq!(live.pop(), reference.pop()),
                    3 if !reference.is_empty() => {
                        let i = at.index(reference.len());
                        live.set_tokens(i, f.tokens);
                        reference[i].tokens = f.tokens;
                    }
                    4 => {
                        live.forget_usage();
                        for m in &mut reference {
                            m.usage_tokens = None;
                        }
                    }
                    _ => {
                        live.push(f);
                        reference.push(f);
                    }
                }
                prop_assert_eq!(live.estimate(), estimate_context_tokens(reference.iter().copied()));
                prop_assert_eq!(live.estimated_total(), reference.iter().map(|m| m.tokens).sum::<u64>());
            }
        }
    }

    /// A session keeps its context's facts for as long as it is open: built at the room they
    /// take, 16 bytes a message, not a doubling vector's up to twice that of 24-byte facts.
    #[test]
    fn facts_are_kept_at_their_size() {
        assert_eq!(std::mem::size_of::<Kept>(), 16);
        let entries: Vec<Entry> = (0..1000)
            .map(|i| {
                Entry::from_value(serde_json::json!({
                    "type": "message", "id": format!("{i:08x}"), "parentId": null,
                    "message": {"role": "user", "content": "x", "timestamp": 1}
                }))
            })
            .collect();
        let path: Vec<&Entry> = entries.iter().collect();
        let live = LiveContext::from_path(&path);
        assert_eq!(live.len(), 1000);
        assert_eq!(live.facts.capacity(), 1000);
    }

    #[test]
    fn matches_fixture_sessions() {
        let cases = crate::test_fixtures::cases_with("matches_fixture_sessions", "session.jsonl");
        for case in cases {
            let Ok(bytes) = std::fs::read(case.join("session.jsonl")) else {
                continue;
            };
            let crate::session::ReadOutcome::Session(p) = crate::session::read_session(&bytes)
            else {
                continue;
            };
            let tree = crate::session::SessionTree::from_parsed(p);
            let branch = tree.branch();
            let path = tree.refs(&branch);
            let ctx = crate::context::build_session_context(&path);
            let pure = estimate_context_tokens(ctx.messages.iter().map(MessageFacts::of));
            assert_eq!(
                LiveContext::from_path(&path).estimate(),
                pure,
                "{}",
                case.display()
            );
        }
    }
}
