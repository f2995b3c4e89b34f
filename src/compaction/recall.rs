//! The recall footer (beyond Pi): the one line that ends every summary compactd writes, telling
//! the model that the exact text behind the summary can be fetched, with which tools, and which
//! entries the summary stands for.
//!
//! Why: a summary is lossy, and a model that does not know the verbatim history is still on file
//! re-runs commands or guesses. The session file is append-only, so every entry a summary
//! replaced is still there; `search_history` / `get_entry` (the MCP server and the Pi
//! extension's tools) and the protocol's `searchHistory` / `getEntry` reach it. The line names
//! the id range so the model can ask for an entry it knows is covered.
//!
//! Pure text functions: the compaction lifecycle appends the line when it finishes a summary
//! ([`with_recall_footer`]) and removes it from a previous summary before that summary is
//! summarized again ([`strip_recall_footer`]), so footers never pile up or reach a model as
//! something to rewrite.

/// How the footer line starts; also how [`strip_recall_footer`] finds it.
pub const FOOTER_PREFIX: &str = "[compactd recall] ";

/// The footer line (without a trailing newline) for a summary standing for the entries from
/// `first_id` to `last_id` (both inclusive, in path order).
pub fn recall_footer(first_id: &str, last_id: &str) -> String {
    let range = if first_id == last_id {
        format!("entry {first_id}")
    } else {
        format!("entries {first_id} to {last_id}")
    };
    format!(
        "{FOOTER_PREFIX}This summary stands for {range}; their exact text is still on file: \
         search it with the search_history tool and fetch an entry by id with get_entry \
         (compactd methods searchHistory and getEntry)."
    )
}

/// `summary` with the footer as its last line, after a blank line. A footer already at its end
/// is replaced, never repeated.
pub fn with_recall_footer(summary: &str, first_id: &str, last_id: &str) -> String {
    let body = strip_recall_footer(summary);
    format!("{body}\n\n{}", recall_footer(first_id, last_id))
}

/// `summary` without a trailing footer line (and the blank line before it); anything else is
/// returned unchanged. Only a footer in last position is removed: the same text quoted inside
/// a summary's body stays.
pub fn strip_recall_footer(summary: &str) -> &str {
    let trimmed = summary.trim_end_matches('\n');
    let line_start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    if !trimmed[line_start..].starts_with(FOOTER_PREFIX) {
        return summary;
    }
    trimmed[..line_start].trim_end_matches('\n')
}

/// The id range a summary's footer names, `(first, last)`, if it ends with one.
pub fn footer_range(summary: &str) -> Option<(&str, &str)> {
    let trimmed = summary.trim_end_matches('\n');
    let line = &trimmed[trimmed.rfind('\n').map_or(0, |i| i + 1)..];
    let rest = line.strip_prefix(FOOTER_PREFIX)?;
    let rest = rest.strip_prefix("This summary stands for ")?;
    let (range, _) = rest.split_once(';')?;
    if let Some(one) = range.strip_prefix("entry ") {
        return Some((one, one));
    }
    range.strip_prefix("entries ")?.split_once(" to ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footer_names_both_tools_both_methods_and_the_range() {
        let line = recall_footer("1a2b3c4d", "9f8e7d6c");
        assert!(!line.contains('\n'), "one line");
        for name in ["search_history", "get_entry", "searchHistory", "getEntry"] {
            assert!(line.contains(name), "{name} in {line}");
        }
        assert!(line.contains("entries 1a2b3c4d to 9f8e7d6c"), "{line}");
        assert!(recall_footer("aa", "aa").contains("entry aa;"));
    }

    #[test]
    fn it_ends_the_summary_once_and_strips_back_to_the_body() {
        let body = "## Goal\nShip it.\n\n<read-files>\nsrc/a.rs\n</read-files>";
        let with = with_recall_footer(body, "a1", "b2");
        assert!(with.starts_with(body));
        assert_eq!(
            with.lines().last(),
            Some(recall_footer("a1", "b2").as_str())
        );
        assert_eq!(strip_recall_footer(&with), body);
        assert_eq!(footer_range(&with), Some(("a1", "b2")));
        // Re-finishing a summary that already has one replaces it.
        let again = with_recall_footer(&with, "a1", "c3");
        assert_eq!(again.matches(FOOTER_PREFIX).count(), 1);
        assert_eq!(footer_range(&again), Some(("a1", "c3")));
        assert_eq!(
            footer_range(&with_recall_footer(body, "x", "x")),
            Some(("x", "x"))
        );
    }

    #[test]
    fn a_summary_without_a_final_footer_is_left_alone() {
        let quoted = format!("## Notes\n{} was quoted\nand more", recall_footer("a", "b"));
        assert_eq!(strip_recall_footer(&quoted), quoted);
        assert_eq!(footer_range(&quoted), None);
        assert_eq!(strip_recall_footer("plain"), "plain");
        assert_eq!(strip_recall_footer(""), "");
    }
}
