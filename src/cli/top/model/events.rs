//! Event notifications folded into the view: each event of `rpc::events`, read back as its
//! typed [`Event`], updates its session's row and adds a line to the event pane.

use std::collections::btree_map::Entry;

use serde::Serialize;
use serde_json::Value;

use super::format::{duration, opt_or_dash, short_id, tokens};
use super::session::{Auto, Compacting, Cost, Last, SessionView, Speculation};
use super::{order_key, Tone, TopModel};
use crate::rpc::events::{Event, EventError};

/// What an event asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Follow {
    /// The event named a session the model has not seen: fetch `listSessions` now.
    pub refresh: bool,
    /// The daemon dropped this connection's subscriptions: subscribe again.
    pub resubscribe: bool,
}

impl TopModel {
    /// One event notification (`method`, `params`) received at `now_ms`. A notification that
    /// is not an event as declared (a newer daemon's, or a malformed one) still shows as a
    /// line, so nothing the daemon says is silently lost.
    pub fn apply_event(&mut self, method: &str, params: &Value, now_ms: i64) -> Follow {
        match Event::parse(method, params) {
            Ok(event) => self.apply(&event, now_ms),
            Err(e) => self.unreadable(method, params, &e, now_ms),
        }
    }

    /// One typed event received at `now_ms`.
    pub fn apply(&mut self, event: &Event<'_>, now_ms: i64) -> Follow {
        let mut follow = Follow::default();
        if let Event::SubscriptionDropped(_) = event {
            self.push(
                now_ms,
                None,
                "the daemon dropped events for this view (it fell behind); resubscribing".into(),
                Tone::Warn,
            );
            follow.resubscribe = true;
            follow.refresh = true;
            return follow;
        }
        let Some(id) = event.session_id() else {
            self.push(now_ms, None, event.name().to_owned(), Tone::Info);
            return follow;
        };
        let key = order_key(id);
        if !self.sessions.contains_key(&key) {
            follow.refresh = true;
        }
        let view = self.sessions.entry(key).or_default();
        if let Some((text, tone)) = fold(view, event, now_ms) {
            self.push(now_ms, Some(id), text, tone);
        }
        follow
    }

    /// A notification [`Event::parse`] refused: an unknown name is shown by name (as any
    /// event was before the daemon declared it), a malformed payload with what is wrong.
    fn unreadable(
        &mut self,
        method: &str,
        params: &Value,
        error: &EventError,
        now_ms: i64,
    ) -> Follow {
        let mut follow = Follow::default();
        let (text, tone) = match error {
            EventError::Unknown(_) => (method.to_owned(), Tone::Info),
            EventError::Payload { .. } => (error.to_string(), Tone::Warn),
        };
        let id = params.get("sessionId").and_then(Value::as_str);
        if let Some(id) = id {
            if let Entry::Vacant(row) = self.sessions.entry(order_key(id)) {
                row.insert(SessionView::default());
                follow.refresh = true;
            }
        }
        self.push(now_ms, id, text, tone);
        follow
    }
}

/// Folds `event` into its session's view; the line it adds to the pane, if any.
fn fold(view: &mut SessionView, event: &Event<'_>, now_ms: i64) -> Option<(String, Tone)> {
    Some(match event {
        Event::CompactionStart(e) => {
            let reason = e.reason.as_str().to_owned();
            view.busy = true;
            let text = format!("compaction started ({reason})");
            view.compacting = Some(Compacting {
                reason,
                since_ms: Some(now_ms),
                retry: None,
            });
            (text, Tone::Info)
        }
        Event::CompactionEnd(e) => {
            let reason = e.reason.as_str();
            let running = view.compacting.take();
            view.busy = false;
            let retry_note = if e.will_retry {
                ", the request is retried"
            } else {
                ""
            };
            if let Some(result) = &e.result {
                let last = Last {
                    at_ms: Some(now_ms),
                    tokens_before: Some(result.tokens_before),
                    tokens_after: Some(result.estimated_tokens_after as f64),
                    summarizer: result
                        .details
                        .as_ref()
                        .and_then(|d| d.get("summarizer"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    duration_ms: running
                        .and_then(|r| r.since_ms)
                        .map(|s| (now_ms - s).max(0) as u64),
                    cost: result.cost.as_ref().map(Cost::of),
                    handoff: result.handoff.as_ref().map(|h| h.score),
                };
                let text = format!(
                    "compacted ({reason}): {} → {} tokens{}{}{}{retry_note}",
                    opt_or_dash(last.tokens_before),
                    opt_or_dash(last.tokens_after),
                    last.duration_ms
                        .map(|d| format!(" in {}", duration(d)))
                        .unwrap_or_default(),
                    last.cost
                        .map(|c| format!(", {}", super::format::cost(c)))
                        .unwrap_or_default(),
                    result
                        .handoff
                        .as_ref()
                        .map(super::format::handoff_note)
                        .unwrap_or_default(),
                );
                if let Some(after) = last.tokens_after {
                    view.tokens = Some(after);
                }
                view.last = Some(last);
                (text, Tone::Good)
            } else if e.aborted {
                (format!("compaction aborted ({reason})"), Tone::Warn)
            } else {
                let error = e.error_message.unwrap_or_default();
                (format!("compaction failed ({reason}): {error}"), Tone::Bad)
            }
        }
        Event::CompactionSuppressed(e) => {
            view.auto = Some(if e.paused {
                Auto::Paused
            } else {
                Auto::Suppressed
            });
            let text = format!(
                "automatic compaction {} by the thrash breaker ({}: {} tokens after the last one, threshold {})",
                if e.paused { "paused" } else { "suppressed" },
                wire_word(&e.reason),
                opt_or_dash(Some(e.tokens_after)),
                opt_or_dash(Some(e.threshold)),
            );
            (text, Tone::Warn)
        }
        Event::ContextCleared(e) => {
            view.tokens = Some(e.tokens_after);
            let n = e.entry_ids.len();
            (
                format!(
                    "cleared {n} old tool output{}: {} tokens freed, {} → {} tokens",
                    if n == 1 { "" } else { "s" },
                    tokens(e.tokens_freed as f64),
                    opt_or_dash(Some(e.tokens_before)),
                    opt_or_dash(Some(e.tokens_after)),
                ),
                Tone::Good,
            )
        }
        Event::CompactionUndone(e) => (
            format!("compaction {} undone", short_id(e.compaction_id)),
            Tone::Info,
        ),
        Event::SummaryEdited(e) => (
            format!("summary of compaction {} edited", short_id(e.compaction_id)),
            Tone::Info,
        ),
        Event::RetryScheduled(e) => {
            let (attempt, max) = (u64::from(e.attempt), u64::from(e.max_attempts));
            if let Some(c) = &mut view.compacting {
                c.retry = Some((attempt, max));
            }
            (
                format!(
                    "summarizer call failed; retry {attempt}/{max} in {}: {}",
                    duration(e.delay_ms),
                    e.error_message
                ),
                Tone::Warn,
            )
        }
        Event::RetryAttemptStart(_) => ("retry attempt started".into(), Tone::Info),
        Event::RetryFinished(_) => {
            if let Some(c) = &mut view.compacting {
                c.retry = None;
            }
            return None;
        }
        Event::SpeculationStarted(e) => {
            let covers = e.covers_through_entry_id.unwrap_or_default().to_owned();
            let text = format!(
                "speculation started: covers through {}, {} tokens",
                short_id(&covers),
                tokens(e.tokens)
            );
            view.speculation = Some(Speculation::Running {
                covers,
                tokens: Some(e.tokens),
            });
            (text, Tone::Info)
        }
        Event::SpeculationReady(e) => {
            let covers = e.covers_through_entry_id.unwrap_or_default().to_owned();
            let summary_tokens = e.summary_tokens as f64;
            let text = format!(
                "speculation ready: covers through {}, summary {} tokens in {}",
                short_id(&covers),
                tokens(summary_tokens),
                duration(e.ms)
            );
            view.speculation = Some(Speculation::Ready {
                covers,
                summary_tokens: Some(summary_tokens),
                ms: Some(e.ms),
            });
            (text, Tone::Good)
        }
        Event::SpeculationDiscarded(e) => {
            view.speculation = None;
            (
                format!("speculation discarded: {}", wire_word(&e.reason)),
                Tone::Info,
            )
        }
        // Handled before: it concerns the connection, not a session.
        Event::SubscriptionDropped(_) => return None,
    })
}

/// A unit variant as the wire spells it (`floor`, `branchChanged`), so a line shows the word
/// the protocol documents.
fn wire_word(v: &impl Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}
