//! The session tree: entries, the id index, the leaf, and root→leaf paths (sessions.md §6).
//!
//! Pure in-memory state. Appends only push; nothing is ever removed, so entry indices are stable
//! handles for the lifetime of a session.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::entry::Entry;
use super::reader::ParsedSession;

/// A session held in memory: header, entries in file order, id index and current leaf.
#[derive(Debug, Clone)]
pub struct SessionTree {
    pub header: Value,
    /// Shared so a compaction can hold the span it summarizes without the session's lock.
    entries: Vec<Arc<Entry>>,
    /// Ids are looked up on every append and parent walk; foldhash is several times faster
    /// than SipHash here and still seeded per process.
    by_id: HashMap<String, usize, foldhash::fast::RandomState>,
    leaf: Option<usize>,
}

impl SessionTree {
    /// Builds the tree Pi holds after loading: the leaf is the last entry in file order.
    pub fn from_parsed(parsed: ParsedSession) -> SessionTree {
        Self::from_shared(parsed.header, parsed.entries)
    }

    pub fn new(header: Value, entries: Vec<Entry>) -> SessionTree {
        Self::from_shared(header, entries.into_iter().map(Arc::new).collect())
    }

    /// [`SessionTree::new`] over entries already shared (the reader makes them on its threads).
    pub fn from_shared(header: Value, entries: Vec<Arc<Entry>>) -> SessionTree {
        let mut by_id = HashMap::with_capacity_and_hasher(
            entries.len(),
            foldhash::fast::RandomState::default(),
        );
        for (i, e) in entries.iter().enumerate() {
            if let Some(id) = &e.id {
                // A duplicate id: the later entry wins, as in Pi's Map (S4).
                by_id.insert(id.clone(), i);
            }
        }
        // Pi's leaf is the *id* of the last entry, resolved through the index.
        let leaf = entries
            .last()
            .and_then(|e| e.id.as_ref())
            .and_then(|id| by_id.get(id).copied());
        SessionTree {
            header,
            entries,
            by_id,
            leaf,
        }
    }

    pub fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }

    pub fn entry(&self, idx: usize) -> &Entry {
        &self.entries[idx]
    }

    /// A shared handle on an entry (for work done outside the session's lock).
    pub fn shared(&self, idx: usize) -> Arc<Entry> {
        self.entries[idx].clone()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Index of the entry with this id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    pub fn contains_id(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub fn leaf(&self) -> Option<usize> {
        self.leaf
    }

    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf.and_then(|i| self.entries[i].id.as_deref())
    }

    /// Moves the leaf (Pi's `branch(id)` / `resetLeaf()`).
    pub fn set_leaf(&mut self, leaf: Option<usize>) {
        self.leaf = leaf;
    }

    /// Adds an entry (already carrying its id and parent) and makes it the leaf.
    pub fn push(&mut self, entry: Entry) -> usize {
        let idx = self.entries.len();
        if let Some(id) = &entry.id {
            self.by_id.insert(id.clone(), idx);
        }
        self.entries.push(Arc::new(entry));
        self.leaf = Some(idx);
        idx
    }

    /// Root→leaf path of entry indices ending at `from` (Pi's `getBranch`). An unknown parent ends
    /// the walk. Unlike Pi, a parent cycle does not hang: the walk stops when it would revisit an
    /// entry.
    pub fn path_to(&self, from: Option<usize>) -> Vec<usize> {
        let mut path = Vec::new();
        let mut current = from;
        while let Some(i) = current {
            if path.len() == self.entries.len() {
                // Only a parent cycle gets here: keep the walk up to its first repeat.
                let mut seen = std::collections::HashSet::new();
                let cut = path
                    .iter()
                    .position(|x| !seen.insert(*x))
                    .unwrap_or(path.len());
                path.truncate(cut);
                break;
            }
            path.push(i);
            current = self.entries[i]
                .parent_id
                .as_deref()
                .and_then(|p| self.by_id.get(p).copied());
        }
        path.reverse();
        path
    }

    /// The current branch: root→leaf.
    pub fn branch(&self) -> Vec<usize> {
        self.path_to(self.leaf)
    }

    /// The entries of a path of indices.
    pub fn refs(&self, path: &[usize]) -> Vec<&Entry> {
        path.iter().map(|&i| &*self.entries[i]).collect()
    }
}

/// Random access to a root→leaf path of entries. The pure algorithms (cut points,
/// preparation, context) are written against this, so they run both on a plain slice of entry
/// references (tests, the CLI) and on a live session's cached branch without building one.
pub trait PathEntries {
    fn path_len(&self) -> usize;
    fn at(&self, i: usize) -> &Entry;
}

impl PathEntries for [&Entry] {
    fn path_len(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> &Entry {
        self[i]
    }
}

impl PathEntries for Vec<&Entry> {
    fn path_len(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> &Entry {
        self[i]
    }
}

/// A path given as entry indices into a tree (a live session's cached branch).
#[derive(Clone, Copy)]
pub struct BranchView<'a> {
    pub tree: &'a SessionTree,
    pub positions: &'a [usize],
}

impl PathEntries for BranchView<'_> {
    fn path_len(&self) -> usize {
        self.positions.len()
    }
    fn at(&self, i: usize) -> &Entry {
        self.tree.entry(self.positions[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn e(id: &str, parent: Option<&str>) -> Entry {
        Entry::from_value(json!({"type":"label","id":id,"parentId":parent}))
    }

    #[test]
    fn path_walks_parents_and_stops_at_unknown_or_cycles() {
        let t = SessionTree::new(
            json!({}),
            vec![
                e("a", None),
                e("b", Some("a")),
                e("x", Some("zz")),
                e("c", Some("b")),
            ],
        );
        assert_eq!(t.branch(), vec![0, 1, 3]);
        assert_eq!(t.path_to(Some(2)), vec![2]);
        let cyc = SessionTree::new(json!({}), vec![e("a", Some("b")), e("b", Some("a"))]);
        let p = cyc.branch();
        assert!(p.len() <= 3, "cycle walk must terminate: {p:?}");
    }

    #[test]
    fn leaf_is_last_entry_and_duplicates_resolve_to_later() {
        let t = SessionTree::new(
            json!({}),
            vec![e("a", None), e("b", Some("a")), e("a", Some("b"))],
        );
        assert_eq!(t.leaf(), Some(2));
        assert_eq!(t.index_of("a"), Some(2));
    }
}
