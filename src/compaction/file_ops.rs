//! Files the summarized span read and modified (compaction.md §6.5), carried across compactions
//! and appended to every summary as `<read-files>` / `<modified-files>` blocks.

use indexmap::IndexSet;
use serde_json::{Map, Value};

use crate::json::cmp_utf16;
use crate::session::entry::{tool_call_ops, FileOpKind};

/// Insertion-ordered sets of paths, as Pi's `FileOperations`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOps {
    pub read: IndexSet<String>,
    pub written: IndexSet<String>,
    pub edited: IndexSet<String>,
}

impl FileOps {
    /// Records the `read`/`write`/`edit` tool calls of an assistant message whose
    /// `arguments.path` is a non-empty string.
    pub fn add_from_message(&mut self, m: &Value) {
        for (kind, path) in tool_call_ops(m) {
            self.add(kind, &path);
        }
    }

    /// Pi 1.6's `extractFileOpsFromMessage`: an assistant message's tool calls, or the calls a
    /// codemode script made, recorded on its tool result (`nestedCalls.calls[].{name,
    /// arguments.path}`).
    pub fn add_from_message_1_6(&mut self, m: &Value) {
        if m.get("role").and_then(Value::as_str) != Some("toolResult") {
            return self.add_from_message(m);
        }
        let calls = m
            .get("nestedCalls")
            .and_then(|n| n.get("calls"))
            .and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            let path = call
                .get("arguments")
                .and_then(|a| a.get("path"))
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty());
            let kind = match call.get("name").and_then(Value::as_str) {
                Some("read") => FileOpKind::Read,
                Some("write") => FileOpKind::Write,
                Some("edit") => FileOpKind::Edit,
                _ => continue,
            };
            if let Some(path) = path {
                self.add(kind, path);
            }
        }
    }

    /// Records one operation.
    pub fn add(&mut self, kind: FileOpKind, path: &str) {
        let set = match kind {
            FileOpKind::Read => &mut self.read,
            FileOpKind::Write => &mut self.written,
            FileOpKind::Edit => &mut self.edited,
        };
        if !set.contains(path) {
            set.insert(path.to_owned());
        }
    }

    /// Seeds from a previous Pi-generated compaction's `details` (`readFiles` → read,
    /// `modifiedFiles` → edited).
    pub fn add_from_details(&mut self, details: &Map<String, Value>) {
        let strings = |k: &str| -> Vec<String> {
            match details.get(k) {
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            }
        };
        self.read.extend(strings("readFiles"));
        self.edited.extend(strings("modifiedFiles"));
    }

    /// `computeFileLists`: (read-only files, modified files), each sorted by UTF-16 units.
    pub fn file_lists(&self) -> (Vec<String>, Vec<String>) {
        let modified: IndexSet<&String> = self.edited.iter().chain(self.written.iter()).collect();
        let mut read: Vec<String> = self
            .read
            .iter()
            .filter(|f| !modified.contains(f))
            .cloned()
            .collect();
        let mut modified: Vec<String> = modified.into_iter().cloned().collect();
        read.sort_by(|a, b| cmp_utf16(a, b));
        modified.sort_by(|a, b| cmp_utf16(a, b));
        (read, modified)
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "read": self.read.iter().collect::<Vec<_>>(),
            "written": self.written.iter().collect::<Vec<_>>(),
            "edited": self.edited.iter().collect::<Vec<_>>(),
        })
    }
}

/// `formatFileOperations`: the text appended to a summary (empty when both lists are empty).
pub fn format_file_operations(read_files: &[String], modified_files: &[String]) -> String {
    let mut sections = Vec::new();
    if !read_files.is_empty() {
        sections.push(format!(
            "<read-files>\n{}\n</read-files>",
            read_files.join("\n")
        ));
    }
    if !modified_files.is_empty() {
        sections.push(format!(
            "<modified-files>\n{}\n</modified-files>",
            modified_files.join("\n")
        ));
    }
    if sections.is_empty() {
        String::new()
    } else {
        format!("\n\n{}", sections.join("\n\n"))
    }
}

/// Beyond Pi (`fileListLimit`): [`format_file_operations`] with each list cut to the `limit`
/// most recently touched paths (`recent`: most recent first; paths not in it rank last, in list
/// order), printed in the list's own order, then a `(+K more)` line. Lists within the limit
/// print exactly as Pi prints them.
pub fn format_file_operations_limited(
    read_files: &[String],
    modified_files: &[String],
    recent: &[&str],
    limit: usize,
) -> String {
    let rank: std::collections::HashMap<&str, usize> = recent
        .iter()
        .enumerate()
        .rev()
        .map(|(i, p)| (*p, i))
        .collect();
    let cut = |list: &[String]| -> Vec<String> {
        if list.len() <= limit {
            return list.to_vec();
        }
        let mut order: Vec<usize> = (0..list.len()).collect();
        order.sort_by_key(|&i| (rank.get(list[i].as_str()).copied().unwrap_or(usize::MAX), i));
        let mut keep = vec![false; list.len()];
        for &i in order.iter().take(limit) {
            keep[i] = true;
        }
        let mut out: Vec<String> = list
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(p, _)| p.clone())
            .collect();
        out.push(format!("(+{} more)", list.len() - limit));
        out
    };
    format_file_operations(&cut(read_files), &cut(modified_files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn read_then_modified_is_only_modified_and_sorted_by_utf16() {
        let mut ops = FileOps::default();
        ops.add_from_message(&json!({"role":"assistant","content":[
            {"type":"toolCall","name":"read","arguments":{"path":"b.rs"}},
            {"type":"toolCall","name":"read","arguments":{"path":"Z.rs"}},
            {"type":"toolCall","name":"edit","arguments":{"path":"b.rs"}},
            {"type":"toolCall","name":"write","arguments":{"path":"a.rs"}},
            {"type":"toolCall","name":"read","arguments":{"path":42}},
            {"type":"toolCall","name":"bash","arguments":{"path":"x"}},
            {"type":"toolCall","name":"read","arguments":{"file_path":"y"}}
        ]}));
        let (read, modified) = ops.file_lists();
        assert_eq!(read, ["Z.rs"]);
        assert_eq!(modified, ["a.rs", "b.rs"]);
        assert_eq!(
            format_file_operations(&read, &modified),
            "\n\n<read-files>\nZ.rs\n</read-files>\n\n<modified-files>\na.rs\nb.rs\n</modified-files>"
        );
        assert_eq!(format_file_operations(&[], &[]), "");
    }

    #[test]
    fn limited_lists_keep_the_most_recent_in_list_order() {
        let read: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let modified: Vec<String> = vec!["m".into()];
        assert_eq!(
            format_file_operations_limited(&read, &modified, &["d", "b", "m", "d"], 2),
            "\n\n<read-files>\nb\nd\n(+2 more)\n</read-files>\n\n<modified-files>\nm\n</modified-files>"
        );
        // Within the limit: Pi's text exactly. Untouched paths fill up in list order.
        assert_eq!(
            format_file_operations_limited(&read, &modified, &[], 4),
            format_file_operations(&read, &modified)
        );
        assert_eq!(
            format_file_operations_limited(&read, &[], &["c"], 2),
            "\n\n<read-files>\na\nc\n(+2 more)\n</read-files>"
        );
    }
}
