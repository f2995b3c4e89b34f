//! Choosing where the kept tail starts (compaction.md §4), quirks A1–A5 included.
//!
//! Walks back from the newest entry accumulating token estimates until `keepRecentTokens` is
//! reached, snaps forward to a valid cut point (never a tool result, so a kept tool result always
//! follows its call), then pulls directly preceding metadata entries to the kept side.

use crate::session::{EntryKind, PathEntries};

/// Result of `findCutPoint`; indices are into the path it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutPoint {
    pub first_kept_entry_index: usize,
    /// Start of the turn the cut splits (`-1` in Pi when there is none).
    pub turn_start_index: Option<usize>,
    pub is_split_turn: bool,
}

/// `findTurnStartIndex`: the nearest turn start at or before `idx`, not before `start`.
pub fn find_turn_start_index<P: PathEntries + ?Sized>(
    path: &P,
    idx: usize,
    start: usize,
) -> Option<usize> {
    (start..=idx).rev().find(|&i| path.at(i).is_turn_start())
}

/// `findCutPoint(entries, start, end, keepRecentTokens)`.
///
/// Pi collects every cut point of the range first; this walks only what it must: forward from
/// `start` to the first cut point, and back from `end` over the kept tail. The result is the
/// same, and the cost no longer grows with the session.
pub fn find_cut_point<P: PathEntries + ?Sized>(
    path: &P,
    start: usize,
    end: usize,
    keep_recent_tokens: i64,
) -> CutPoint {
    let end = end.min(path.path_len());
    let Some(first_cp) = (start..end).find(|&i| path.at(i).is_cut_point()) else {
        return CutPoint {
            first_kept_entry_index: start,
            turn_start_index: None,
            is_split_turn: false,
        };
    };
    let mut cut = first_cp;
    let mut acc: i64 = 0;
    for i in (start..end).rev() {
        let t = path.at(i).tokens as i64;
        if t == 0 {
            continue;
        }
        acc += t;
        if acc >= keep_recent_tokens {
            // The first cut point at or after `i` (`first_cp` when `i` is before it).
            cut = (i.max(first_cp)..end)
                .find(|&c| path.at(c).is_cut_point())
                .unwrap_or(first_cp);
            break;
        }
    }
    // Metadata directly before the cut goes to the kept side (A1).
    while cut > start {
        let prev = path.at(cut - 1);
        if prev.kind == EntryKind::Compaction || prev.is_context_visible() {
            break;
        }
        cut -= 1;
    }
    let starts_turn = path.at(cut).is_turn_start();
    let turn_start_index = if starts_turn {
        None
    } else {
        find_turn_start_index(path, cut, start)
    };
    CutPoint {
        first_kept_entry_index: cut,
        turn_start_index,
        is_split_turn: !starts_turn && turn_start_index.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Entry;
    use serde_json::{json, Value};

    fn msg(id: &str, role: &str, chars: usize) -> Entry {
        let text = "x".repeat(chars);
        let m: Value = match role {
            "assistant" => json!({"role":"assistant","content":[{"type":"text","text":text}]}),
            "toolResult" => {
                json!({"role":"toolResult","toolCallId":"t","toolName":"read","content":[{"type":"text","text":text}],"isError":false})
            }
            _ => json!({"role":role,"content":text}),
        };
        Entry::from_value(json!({"type":"message","id":id,"parentId":null,"message":m}))
    }

    fn label(id: &str) -> Entry {
        Entry::from_value(json!({"type":"label","id":id,"parentId":null,"targetId":"u0"}))
    }

    #[test]
    fn a1_metadata_before_user_makes_a_split_turn() {
        let entries = [
            msg("u0", "user", 40),
            msg("a1", "assistant", 40),
            msg("t2", "toolResult", 40),
            msg("a3", "assistant", 40),
            label("l4"),
            msg("u5", "user", 40),
            msg("a6", "assistant", 40),
        ];
        let path: Vec<&Entry> = entries.iter().collect();
        let cp = find_cut_point(&path, 0, path.len(), 20);
        assert_eq!(
            cp,
            CutPoint {
                first_kept_entry_index: 4,
                turn_start_index: Some(0),
                is_split_turn: true
            }
        );
    }

    #[test]
    fn a2_huge_trailing_tool_result_keeps_everything() {
        let entries = [
            msg("u", "user", 40),
            msg("a", "assistant", 40),
            msg("t", "toolResult", 40),
            msg("u2", "user", 40),
            msg("a2", "assistant", 40),
            msg("t2", "toolResult", 100_000),
        ];
        let path: Vec<&Entry> = entries.iter().collect();
        let cp = find_cut_point(&path, 0, path.len(), 20_000);
        assert_eq!(cp.first_kept_entry_index, 0);
        assert!(!cp.is_split_turn);
    }

    #[test]
    fn never_cuts_at_a_tool_result() {
        let entries = [
            msg("u", "user", 400),
            msg("a", "assistant", 400),
            msg("t", "toolResult", 400),
        ];
        let path: Vec<&Entry> = entries.iter().collect();
        for keep in 0..400 {
            let cp = find_cut_point(&path, 0, path.len(), keep);
            assert_ne!(path[cp.first_kept_entry_index].id.as_deref(), Some("t"));
        }
    }
}
