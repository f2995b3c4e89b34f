//! Running totals along one root→leaf path, so the questions a live session is asked after
//! every append (how big is the context, should it compact, what would a compaction summarize)
//! cost O(kept tail) instead of a walk over the whole session.
//!
//! The index holds, per path position, prefix sums of the token estimates and message counts,
//! the last position with valid usage, the compactions on the path, and every file operation by
//! path. It is built once from a path (open, branch switch, another writer's entries off the
//! leaf) and extended in O(1) when an entry is appended at the leaf. Pi's definitions stay the
//! reference: [`crate::compaction::tokens::estimate_context_tokens`] over
//! [`crate::context::context_positions`], and `prepareCompaction`'s boundaries; property tests
//! check the index against them.

use std::collections::HashMap;
use std::ops::Range;

use super::file_ops::FileOps;
use super::tokens::ContextEstimate;
use crate::session::entry::FileOpKind;
use crate::session::{Entry, EntryKind, PathEntries};

/// Where the latest compaction on the path puts the context (sessions.md §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatestCompaction {
    /// Path position of the compaction entry.
    pub at: usize,
    /// Position of the first path entry with the compaction's id (Pi slices from there).
    pub id_at: usize,
    /// Position of `firstKeptEntryId` before `id_at` (the kept part of the context).
    pub kept_in_context: Option<usize>,
    /// Position of `firstKeptEntryId` anywhere on the path (`prepareCompaction`'s boundary).
    pub kept_on_path: Option<usize>,
}

/// Positions of one file's operations, by kind; each entry is (path position, block index).
#[derive(Debug, Clone, Default)]
struct FileRecord {
    path: Box<str>,
    ops: [Vec<(u32, u16)>; 3],
}

fn kind_slot(kind: FileOpKind) -> usize {
    match kind {
        FileOpKind::Read => 0,
        FileOpKind::Write => 1,
        FileOpKind::Edit => 2,
    }
}

/// The index of one path. Positions are path positions (0 = root).
#[derive(Debug, Clone)]
pub struct BranchIndex {
    /// `ctx_tokens[i]`: sum of the estimates of positions `< i` that project a message.
    ctx_tokens: Vec<u64>,
    ctx_count: Vec<u32>,
    /// The same over messages a compaction would summarize (compaction entries excluded).
    msg_tokens: Vec<u64>,
    msg_count: Vec<u32>,
    /// `usage_before[i]`: the last position `< i` with valid usage, `u32::MAX` for none.
    usage_before: Vec<u32>,
    compactions: Vec<usize>,
    latest: Option<LatestCompaction>,
    files: Vec<FileRecord>,
    file_ids: HashMap<Box<str>, u32>,
}

const NONE: u32 = u32::MAX;

impl Default for BranchIndex {
    /// The index of the empty path.
    fn default() -> Self {
        BranchIndex {
            ctx_tokens: vec![0],
            ctx_count: vec![0],
            msg_tokens: vec![0],
            msg_count: vec![0],
            usage_before: vec![NONE],
            compactions: Vec::new(),
            latest: None,
            files: Vec::new(),
            file_ids: HashMap::new(),
        }
    }
}

impl BranchIndex {
    /// Builds the index of a whole path. O(path).
    pub fn build<P: PathEntries + ?Sized>(path: &P) -> BranchIndex {
        let n = path.path_len();
        let mut index = BranchIndex::default();
        for v in [&mut index.ctx_tokens, &mut index.msg_tokens] {
            v.reserve(n);
        }
        for v in [
            &mut index.ctx_count,
            &mut index.msg_count,
            &mut index.usage_before,
        ] {
            v.reserve(n);
        }
        for i in 0..n {
            index.push_facts(i, path.at(i));
        }
        if let Some(&at) = index.compactions.last() {
            index.latest = Some(locate_latest(path, at));
        }
        index
    }

    fn push_facts(&mut self, pos: usize, e: &Entry) {
        let visible = e.role.is_some();
        let summarizable = visible && e.kind != EntryKind::Compaction;
        let last = |v: &Vec<u64>| v.last().copied().unwrap_or(0);
        let last32 = |v: &Vec<u32>| v.last().copied().unwrap_or(0);
        let (ct, cc) = (last(&self.ctx_tokens), last32(&self.ctx_count));
        let (mt, mc) = (last(&self.msg_tokens), last32(&self.msg_count));
        // Kept while the session is open: grown gently (`session::room`).
        use crate::session::room::push;
        push(
            &mut self.ctx_tokens,
            ct + if visible { e.tokens } else { 0 },
        );
        push(&mut self.ctx_count, cc + u32::from(visible));
        push(
            &mut self.msg_tokens,
            mt + if summarizable { e.tokens } else { 0 },
        );
        push(&mut self.msg_count, mc + u32::from(summarizable));
        let prev = self.usage_before.last().copied().unwrap_or(NONE);
        push(
            &mut self.usage_before,
            if e.usage_tokens().is_some() && visible {
                pos as u32
            } else {
                prev
            },
        );
        if e.kind == EntryKind::Compaction {
            self.compactions.push(pos);
        }
        for (block, (kind, file)) in e.file_ops.iter().enumerate() {
            let id = match self.file_ids.get(file) {
                Some(&id) => id,
                None => {
                    let id = self.files.len() as u32;
                    self.files.push(FileRecord {
                        path: file.clone(),
                        ..FileRecord::default()
                    });
                    self.file_ids.insert(file.clone(), id);
                    id
                }
            };
            self.files[id as usize].ops[kind_slot(*kind)]
                .push((pos as u32, block.min(u16::MAX as usize) as u16));
        }
    }

    /// Extends the index by the path's new last entry (an append at the leaf). O(1), except
    /// that a compaction locates its kept entry once (O(path)).
    pub fn push<P: PathEntries + ?Sized>(&mut self, path: &P) {
        let pos = self.len();
        debug_assert_eq!(pos + 1, path.path_len());
        let e = path.at(pos);
        self.push_facts(pos, e);
        if e.kind == EntryKind::Compaction {
            self.latest = Some(locate_latest(path, pos));
        }
    }

    /// Number of path positions indexed.
    pub fn len(&self) -> usize {
        self.ctx_tokens.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latest compaction on the path.
    pub fn latest_compaction(&self) -> Option<LatestCompaction> {
        self.latest
    }

    /// The last path position with valid usage.
    pub fn last_usage(&self) -> Option<usize> {
        self.usage_before
            .last()
            .copied()
            .filter(|&u| u != NONE)
            .map(|u| u as usize)
    }

    /// Whether a message with valid usage follows the latest compaction (until one does, the
    /// context's real size is unknown: Pi's `getContextUsage` reports null tokens).
    pub fn usage_known(&self) -> bool {
        match (self.latest, self.last_usage()) {
            (None, _) => true,
            (Some(l), Some(u)) => u > l.at,
            (Some(_), None) => false,
        }
    }

    /// The path ranges whose messages form the context, in context order.
    pub fn context_ranges(&self) -> Vec<Range<usize>> {
        let n = self.len();
        match self.latest {
            None => std::iter::once(0..n).collect(),
            Some(l) => {
                let mut out: Vec<Range<usize>> = std::iter::once(l.at..l.at + 1).collect();
                if let Some(k) = l.kept_in_context {
                    out.push(k..l.id_at);
                }
                out.push((l.id_at + 1).min(n)..n);
                out
            }
        }
    }

    /// Sum of the context messages' estimates (Pi's `estimatedTokensAfter` right after a
    /// compaction).
    pub fn context_total(&self) -> u64 {
        self.context_ranges()
            .into_iter()
            .filter(|r| r.start < r.end)
            .map(|r| self.range_sums(r).0)
            .sum()
    }

    /// Estimate of the messages projected by `range`, and their count.
    pub fn range_sums(&self, range: Range<usize>) -> (u64, usize) {
        (
            self.ctx_tokens[range.end] - self.ctx_tokens[range.start],
            (self.ctx_count[range.end] - self.ctx_count[range.start]) as usize,
        )
    }

    /// Estimate and count of the messages a compaction would summarize in `range` (compaction
    /// entries excluded, as `prepareCompaction` excludes them).
    pub fn summarizable_sums(&self, range: Range<usize>) -> (u64, usize) {
        if range.start >= range.end {
            return (0, 0);
        }
        (
            self.msg_tokens[range.end] - self.msg_tokens[range.start],
            (self.msg_count[range.end] - self.msg_count[range.start]) as usize,
        )
    }

    /// `estimateContextTokens(buildSessionContext(path).messages)`. O(1).
    pub fn context_estimate<P: PathEntries + ?Sized>(&self, path: &P) -> ContextEstimate {
        let mut total = 0u64;
        let mut before = 0usize;
        // (message index, usage tokens, tokens after it so far)
        let mut last: Option<(usize, f64, u64)> = None;
        for r in self.context_ranges() {
            if r.start >= r.end {
                continue;
            }
            let (tokens, count) = self.range_sums(r.clone());
            total += tokens;
            let u = self.usage_before[r.end];
            if u != NONE && u as usize >= r.start {
                let u = u as usize;
                let index = before + (self.ctx_count[u] - self.ctx_count[r.start]) as usize;
                let after = self.ctx_tokens[r.end] - self.ctx_tokens[u + 1];
                let usage = path.at(u).usage_tokens().unwrap_or(0.0);
                last = Some((index, usage, after));
            } else if let Some(l) = last.as_mut() {
                l.2 += tokens;
            }
            before += count;
        }
        match last {
            Some((index, usage, trailing)) => ContextEstimate {
                tokens: usage + trailing as f64,
                usage_tokens: usage,
                trailing_tokens: trailing,
                last_usage_index: Some(index),
            },
            None => ContextEstimate {
                tokens: total as f64,
                usage_tokens: 0.0,
                trailing_tokens: total,
                last_usage_index: None,
            },
        }
    }

    /// Pi's `FileOperations` over the tool calls in `range`, seeded with `seed` (the previous
    /// compaction's lists), in Pi's insertion order. O(files · log ops).
    pub fn file_ops(&self, range: Range<usize>, seed: FileOps) -> FileOps {
        let mut ops = seed;
        if range.start >= range.end {
            return ops;
        }
        let (start, end) = (range.start as u32, range.end as u32);
        for slot in 0..3 {
            let mut firsts: Vec<((u32, u16), &str)> = Vec::new();
            for f in &self.files {
                let list = &f.ops[slot];
                let i = list.partition_point(|&(p, _)| p < start);
                if let Some(&first) = list.get(i).filter(|(p, _)| *p < end) {
                    firsts.push((first, &f.path));
                }
            }
            firsts.sort_unstable();
            let kind = [FileOpKind::Read, FileOpKind::Write, FileOpKind::Edit][slot];
            for (_, path) in firsts {
                ops.add(kind, path);
            }
        }
        ops
    }
}

/// Finds where the compaction at `at` puts the context (two O(path) scans, once per
/// compaction).
fn locate_latest<P: PathEntries + ?Sized>(path: &P, at: usize) -> LatestCompaction {
    let c = path.at(at);
    let id_at = (0..path.path_len())
        .find(|&i| path.at(i).id == c.id)
        .unwrap_or(at);
    let first_kept = c.str_field("firstKeptEntryId");
    let kept_on_path = first_kept
        .and_then(|fk| (0..path.path_len()).find(|&i| path.at(i).id.as_deref() == Some(fk)));
    let kept_in_context = kept_on_path.filter(|&k| k < id_at);
    LatestCompaction {
        at,
        id_at,
        kept_in_context,
        kept_on_path,
    }
}
