//! The session tree: entries, the id index, the leaf, and root→leaf paths (sessions.md §6).
//!
//! Pure in-memory state. Appends only push; nothing is ever removed, so entry indices are stable
//! handles for the lifetime of a session.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::hash_table::{Entry as Slot, HashTable};
use serde_json::Value;

use super::entry::Entry;
use super::reader::ParsedSession;

/// `parents[i]` when entry `i` names no parent, or one that no entry has.
const NO_PARENT: usize = usize::MAX;

/// A session held in memory: header, entries in file order, id index, resolved parents and
/// current leaf.
#[derive(Debug, Clone)]
pub struct SessionTree {
    pub header: Value,
    /// Shared so a compaction can hold the span it summarizes without the session's lock.
    entries: Vec<Arc<Entry>>,
    /// The entry each id names (the latest with that id, as in Pi's `Map`), stored as an index
    /// and compared through the entry's own id: no id is copied into the index. foldhash is
    /// several times faster than SipHash here and still seeded per process.
    by_id: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    /// `parents[i]`: the entry that entry `i`'s `parentId` names in `by_id` *now*, or
    /// [`NO_PARENT`]. Pi looks each parent up at walk time; keeping the answer current on every
    /// append makes a walk follow plain indices (a 100 MB session's branch is 70k steps).
    parents: Vec<usize>,
    /// Parent ids that name no entry yet, with the entries naming them: an append that brings
    /// such an id links them (Pi's lookup would find it from then on).
    orphans: HashMap<Box<str>, Vec<usize>, foldhash::fast::RandomState>,
    /// Some id is carried by more than one entry (only foreign writers do this).
    duplicate_ids: bool,
    leaf: Option<usize>,
}

/// Makes entry `idx` the one its id names; returns the entry that id named before, if any.
fn index_id(
    by_id: &mut HashTable<usize>,
    hasher: &foldhash::fast::RandomState,
    entries: &[Arc<Entry>],
    idx: usize,
) -> Option<usize> {
    let id = entries[idx].id.as_deref()?;
    let id_of = |i: &usize| entries[*i].id.as_deref();
    // Only entries with an id are in the index, so rehashing never meets `None`.
    let rehash = |i: &usize| hasher.hash_one(id_of(i).unwrap_or_default());
    match by_id.entry(hasher.hash_one(id), |i| id_of(i) == Some(id), rehash) {
        Slot::Occupied(mut slot) => Some(std::mem::replace(slot.get_mut(), idx)),
        Slot::Vacant(slot) => {
            slot.insert(idx);
            None
        }
    }
}

/// `child`'s parent: `found`, the entry its parent id `parent` names, or [`NO_PARENT`] (then
/// `child` waits in `orphans` for an entry with that id).
fn link(
    found: Option<usize>,
    orphans: &mut HashMap<Box<str>, Vec<usize>, foldhash::fast::RandomState>,
    child: usize,
    parent: &str,
) -> usize {
    found.unwrap_or_else(|| {
        orphans.entry(parent.into()).or_default().push(child);
        NO_PARENT
    })
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
    /// One pass in file order, linking as appends do; Pi resolves parents only once the whole
    /// file is indexed, which differs only where an id repeats, so then they are resolved again.
    pub fn from_shared(header: Value, entries: Vec<Arc<Entry>>) -> SessionTree {
        let mut tree = SessionTree {
            header,
            by_id: HashTable::with_capacity(entries.len()),
            hasher: foldhash::fast::RandomState::default(),
            parents: Vec::with_capacity(entries.len()),
            orphans: HashMap::default(),
            duplicate_ids: false,
            leaf: None,
            entries,
        };
        for i in 0..tree.entries.len() {
            // A duplicate id: the later entry wins, as in Pi's Map (S4).
            tree.duplicate_ids |=
                index_id(&mut tree.by_id, &tree.hasher, &tree.entries, i).is_some();
            tree.link_orphans_of(i);
            let parent = match tree.entries[i].parent_id.as_deref() {
                None => NO_PARENT,
                // The common case, without a lookup: the line before is the parent.
                Some(p) if i > 0 && tree.entries[i - 1].id.as_deref() == Some(p) => i - 1,
                Some(p) => link(tree.index_of(p), &mut tree.orphans, i, p),
            };
            tree.parents.push(parent);
        }
        if tree.duplicate_ids {
            tree.orphans.clear();
            for i in 0..tree.entries.len() {
                tree.parents[i] = match tree.entries[i].parent_id.as_deref() {
                    None => NO_PARENT,
                    Some(p) => link(tree.index_of(p), &mut tree.orphans, i, p),
                };
            }
        }
        // Pi's leaf is the *id* of the last entry, resolved through the index.
        tree.leaf = tree
            .entries
            .last()
            .and_then(|e| e.id.as_deref())
            .and_then(|id| tree.index_of(id));
        tree
    }

    /// Links the entries that were waiting for entry `idx`'s id.
    fn link_orphans_of(&mut self, idx: usize) {
        if self.orphans.is_empty() {
            return;
        }
        if let Some(children) = self.entries[idx]
            .id
            .as_deref()
            .and_then(|id| self.orphans.remove(id))
        {
            for child in children {
                self.parents[child] = idx;
            }
        }
    }

    pub fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }

    pub fn entry(&self, idx: usize) -> &Entry {
        &self.entries[idx]
    }

    /// The id of entry `idx` as the protocol reports it: empty when the entry has none (every
    /// entry compactd appends has one).
    pub fn id_at(&self, idx: usize) -> String {
        self.entries[idx]
            .id
            .as_deref()
            .unwrap_or_default()
            .to_owned()
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
        let entries = &self.entries;
        self.by_id
            .find(self.hasher.hash_one(id), |&i| {
                entries[i].id.as_deref() == Some(id)
            })
            .copied()
    }

    pub fn contains_id(&self, id: &str) -> bool {
        self.index_of(id).is_some()
    }

    /// The header's `id` (Pi's session id), when it has one.
    pub fn header_id(&self) -> Option<&str> {
        self.header.get("id").and_then(serde_json::Value::as_str)
    }

    /// Whether `id` names anything in the session: an entry or the header. A new entry must
    /// take neither, or the id would appear twice in the file.
    pub fn uses_id(&self, id: &str) -> bool {
        self.header_id() == Some(id) || self.contains_id(id)
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

    /// Adds an entry (already carrying its id and parent) and makes it the leaf. Its id joins
    /// the index first, so every parent is resolved as Pi's walk would resolve it from now on:
    /// entries that named this id while no entry had it link to it, entries whose parent was an
    /// earlier entry with the same id (a foreign writer's duplicate) move to it, and its own
    /// parent is looked up last (an entry naming itself is a cycle, as in Pi).
    pub fn push(&mut self, entry: Entry) -> usize {
        let idx = self.entries.len();
        let entry = Arc::new(entry);
        super::room::push(&mut self.entries, entry.clone());
        if let Some(old) = index_id(&mut self.by_id, &self.hasher, &self.entries, idx) {
            self.duplicate_ids = true;
            for p in self.parents.iter_mut().filter(|p| **p == old) {
                *p = idx;
            }
        }
        self.link_orphans_of(idx);
        let parent = match entry.parent_id.as_deref() {
            Some(p) => link(self.index_of(p), &mut self.orphans, idx, p),
            None => NO_PARENT,
        };
        super::room::push(&mut self.parents, parent);
        self.leaf = Some(idx);
        idx
    }

    /// How many entries with an id are no entry's parent (the tree's leaves; entries without an
    /// id are never counted).
    pub fn leaf_count(&self) -> usize {
        let mut has_child = vec![false; self.entries.len()];
        for &p in &self.parents {
            if p != NO_PARENT {
                has_child[p] = true;
            }
        }
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, e)| match e.id.as_deref() {
                None => false,
                // With duplicates, children link to the latest entry with the id, and every
                // entry carrying that id counts as their parent.
                Some(id) if self.duplicate_ids => !self.index_of(id).is_some_and(|j| has_child[j]),
                Some(_) => !has_child[*i],
            })
            .count()
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
            current = Some(self.parents[i]).filter(|&p| p != NO_PARENT);
        }
        path.reverse();
        // A session keeps its branch for as long as it is open: the walk's doubling left up to
        // twice the room it needs (a 100 MB session's branch is 72k positions).
        path.shrink_to_fit();
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

    /// The branch a session keeps is held at its size, without the walk's spare room.
    #[test]
    fn a_branch_takes_no_more_room_than_its_positions() {
        let entries: Vec<Entry> = (0..1000)
            .map(|i| {
                let parent = (i > 0).then(|| format!("{:08x}", i - 1));
                e(&format!("{i:08x}"), parent.as_deref())
            })
            .collect();
        let t = SessionTree::new(json!({}), entries);
        let branch = t.branch();
        assert_eq!(branch.len(), 1000);
        assert_eq!(branch.capacity(), 1000);
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

    /// Pi's model, looked up at walk time: the latest entry with each id, and walks that
    /// resolve every parent through that map (cut at the first repeat, as `path_to` is).
    struct Reference<'a> {
        entries: &'a [(String, Option<String>)],
        by_id: HashMap<&'a str, usize>,
    }

    impl<'a> Reference<'a> {
        fn new(entries: &'a [(String, Option<String>)]) -> Self {
            let by_id = entries
                .iter()
                .enumerate()
                .map(|(i, (id, _))| (id.as_str(), i))
                .collect();
            Reference { entries, by_id }
        }
        fn path_to(&self, from: usize) -> Vec<usize> {
            let mut path = Vec::new();
            let mut current = Some(from);
            while let Some(i) = current {
                if path.contains(&i) {
                    break;
                }
                path.push(i);
                current = self.entries[i]
                    .1
                    .as_deref()
                    .and_then(|p| self.by_id.get(p).copied());
            }
            path.reverse();
            path
        }
        fn leaf_count(&self) -> usize {
            let parents: std::collections::HashSet<&str> = self
                .entries
                .iter()
                .filter_map(|(_, p)| p.as_deref())
                .collect();
            self.entries
                .iter()
                .filter(|(id, _)| !parents.contains(id.as_str()))
                .count()
        }
    }

    fn entries_strategy() -> impl proptest::strategy::Strategy<Value = Vec<(String, Option<String>)>>
    {
        use proptest::prelude::*;
        // Few ids, so duplicates, late parents, self-parents and cycles are all common.
        let id = || (0u8..12).prop_map(|n| format!("i{n}"));
        proptest::collection::vec((id(), proptest::option::weighted(0.85, id())), 0..40)
    }

    proptest::proptest! {
        /// However the entries arrive (loaded at once or appended one by one, with a load of any
        /// prefix in between), every entry's path and the leaf count are what Pi's walk-time
        /// lookups give on the same entries.
        #[test]
        fn resolved_parents_match_walk_time_lookups(
            entries in entries_strategy(),
            loaded in 0usize..40,
        ) {
            let loaded = loaded.min(entries.len());
            let make = |(id, p): &(String, Option<String>)| e(id, p.as_deref());
            let mut tree =
                SessionTree::new(json!({}), entries[..loaded].iter().map(make).collect());
            for (n, item) in entries.iter().enumerate().skip(loaded) {
                let reference = Reference::new(&entries[..n]);
                for i in 0..n {
                    proptest::prop_assert_eq!(tree.path_to(Some(i)), reference.path_to(i));
                }
                tree.push(make(item));
            }
            let reference = Reference::new(&entries);
            for i in 0..entries.len() {
                proptest::prop_assert_eq!(tree.path_to(Some(i)), reference.path_to(i));
            }
            proptest::prop_assert_eq!(tree.leaf_count(), reference.leaf_count());
        }
    }

    #[test]
    fn an_append_links_earlier_orphans_and_takes_over_a_duplicate_ids_children() {
        let mut t = SessionTree::new(json!({}), vec![e("b", Some("a")), e("x", Some("x"))]);
        assert_eq!(t.path_to(Some(0)), vec![0]);
        t.push(e("a", None));
        assert_eq!(t.path_to(Some(0)), vec![2, 0]);
        t.push(e("c", Some("b")));
        assert_eq!(t.path_to(Some(3)), vec![2, 0, 3]);
        // A second "b": "c" now hangs below it, as Pi's map resolves "b" to the later entry.
        t.push(e("b", None));
        assert_eq!(t.path_to(Some(3)), vec![4, 3]);
        // "x" names itself and "a", "b" are parents: "c" is the one leaf.
        assert_eq!(t.leaf_count(), 1);
    }
}
