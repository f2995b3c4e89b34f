//! Pi's token estimate of one message, and the usage figures a reply reports (compaction.md
//! §3). Pi never tokenizes: it counts UTF-16 units and divides by four, rounding up per message,
//! and trusts the provider's reported usage of the last successful assistant reply over any
//! estimate. Malformed fields (where Pi would throw) count as zero here.
//!
//! These are the primitives both the session reader (which records each entry's estimate as it
//! reads the line) and the compaction core (`compaction::tokens`, which sums them along a path)
//! build on, so they sit below both.

use serde_json::{Map, Value};

use crate::json::{stringify_len, utf16_len};

/// Characters an image block is assumed to cost (1200 tokens).
pub const ESTIMATED_IMAGE_CHARS: u64 = 4800;

fn str_len(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_str).map_or(0, |s| utf16_len(s) as u64)
}

/// Characters of a user/toolResult/custom `content`: a string's length, or the sum over text
/// blocks (with truthy text) and images.
pub fn content_chars(content: Option<&Value>) -> u64 {
    match content {
        Some(Value::String(s)) => utf16_len(s) as u64,
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => str_len(b.get("text")),
                Some("image") => ESTIMATED_IMAGE_CHARS,
                _ => 0,
            })
            .sum(),
        _ => 0,
    }
}

/// `ceil(content_chars / 4)`.
pub fn estimate_content(content: Option<&Value>) -> u64 {
    content_chars(content).div_ceil(4)
}

/// `ceil(len(text) / 4)` for a summary-like string field.
pub fn text_tokens(text: Option<&Value>) -> u64 {
    str_len(text).div_ceil(4)
}

/// Characters of an assistant message's content blocks: text, thinking, and tool calls as
/// `name + JSON.stringify(arguments)`.
fn assistant_chars(content: Option<&Value>) -> u64 {
    let Some(Value::Array(blocks)) = content else {
        return 0;
    };
    blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => str_len(b.get("text")),
            Some("thinking") => str_len(b.get("thinking")),
            Some("toolCall") => {
                str_len(b.get("name")) + b.get("arguments").map_or(0, |a| stringify_len(a) as u64)
            }
            _ => 0,
        })
        .sum()
}

/// `estimateTokens(message)` for an AgentMessage object.
pub fn estimate_message(m: &Map<String, Value>) -> u64 {
    let chars = match m.get("role").and_then(Value::as_str) {
        Some("user" | "toolResult" | "custom") => content_chars(m.get("content")),
        Some("assistant") => assistant_chars(m.get("content")),
        Some("bashExecution") => str_len(m.get("command")) + str_len(m.get("output")),
        Some("branchSummary" | "compactionSummary") => str_len(m.get("summary")),
        _ => 0,
    };
    chars.div_ceil(4)
}

/// Pi 1.6's `estimateTokens` of a system message (0.85 counts it as 0): its content (text and
/// images) plus the text of each non-empty section plus `JSON.stringify(toolsAdded)`.
pub fn system_message_tokens(m: &Map<String, Value>) -> u64 {
    let mut chars = content_chars(m.get("content"));
    if let Some(Value::Object(sections)) = m.get("sections") {
        for section in sections.values() {
            chars += match section {
                Value::String(s) => utf16_len(s) as u64,
                Value::Array(a) => a.len() as u64,
                _ => 0,
            };
        }
    }
    if let Some(tools) = m.get("toolsAdded").filter(|t| crate::json::truthy(Some(t))) {
        chars += stringify_len(tools) as u64;
    }
    chars.div_ceil(4)
}

/// `estimateTokens(message)` under `version`'s rules: 1.6 counts system messages.
pub fn estimate_message_in(m: &Map<String, Value>, version: crate::pi_version::PiVersion) -> u64 {
    match m.get("role").and_then(Value::as_str) {
        Some("system") if version.is_1_6() => system_message_tokens(m),
        _ => estimate_message(m),
    }
}

/// `estimateTokens` of a message value (0 for non-objects).
pub fn estimate_value(m: &Value) -> u64 {
    m.as_object().map_or(0, estimate_message)
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// `calculateContextTokens(usage)`: `totalTokens`, or when that is 0/missing/NaN the sum of
/// input, output, cacheRead and cacheWrite (NaN when any is missing).
pub fn calculate_context_tokens(usage: &Map<String, Value>) -> f64 {
    let total = num(usage.get("totalTokens"));
    if total != 0.0 && !total.is_nan() {
        return total;
    }
    num(usage.get("input"))
        + num(usage.get("output"))
        + num(usage.get("cacheRead"))
        + num(usage.get("cacheWrite"))
}

/// For an assistant message: its context tokens when the usage is valid (compaction.md §3.3:
/// truthy usage, not aborted/error, `calculateContextTokens > 0`).
pub fn valid_usage_tokens(m: &Map<String, Value>) -> Option<f64> {
    if !crate::json::truthy(m.get("usage")) {
        return None;
    }
    let stop = m.get("stopReason").and_then(Value::as_str);
    if matches!(stop, Some("aborted" | "error")) {
        return None;
    }
    let usage = m.get("usage")?.as_object()?;
    let tokens = calculate_context_tokens(usage);
    (tokens > 0.0).then_some(tokens)
}

/// A valid usage or none, in the eight bytes of an `f64` (`Option<f64>` takes sixteen): kept
/// once per entry and once per context message of every open session, where those eight bytes
/// add up to megabytes. None is NaN, which no valid usage is ([`valid_usage_tokens`] keeps only
/// values `> 0`), so every value it is given comes back bit for bit.
#[derive(Clone, Copy)]
pub struct PackedUsage(f64);

impl PackedUsage {
    pub const NONE: PackedUsage = PackedUsage(f64::NAN);

    /// `Some(NaN)`, which is never a valid usage, reads back as none.
    pub fn new(usage: Option<f64>) -> PackedUsage {
        PackedUsage(usage.unwrap_or(f64::NAN))
    }

    pub fn get(self) -> Option<f64> {
        (!self.0.is_nan()).then_some(self.0)
    }
}

impl PartialEq for PackedUsage {
    fn eq(&self, other: &PackedUsage) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for PackedUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// Valid usage of any message value (only assistants qualify).
pub fn message_usage_tokens(m: &Value) -> Option<f64> {
    let obj = m.as_object()?;
    if obj.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    valid_usage_tokens(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_usage_gives_back_every_valid_usage_bit_for_bit_and_none_as_none() {
        for u in [
            1.0,
            0.5,
            12_345.678,
            f64::MIN_POSITIVE,
            1e300,
            f64::INFINITY,
        ] {
            let got = PackedUsage::new(Some(u)).get();
            assert_eq!(got.map(f64::to_bits), Some(u.to_bits()));
        }
        assert_eq!(PackedUsage::new(None).get(), None);
        assert_eq!(PackedUsage::NONE, PackedUsage::new(None));
        assert_ne!(PackedUsage::new(Some(2.0)), PackedUsage::NONE);
        // Half the size of the Option it stands for, which is why it exists.
        assert_eq!(std::mem::size_of::<PackedUsage>(), 8);
    }
}
