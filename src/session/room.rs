//! How the vectors a session keeps one slot per entry in grow on an append.
//!
//! An open session's per-entry vectors (the tree's entries and parents, the branch, the agent
//! context, the running totals along the branch) are built at exactly the room they take, and
//! kept for as long as the session is open. `Vec::push` doubles a full vector: the first append
//! to a 72k-entry session would make each of them twice its size, some 5 MB more per 100 MB
//! session for the rest of its life. [`push`] grows a full vector by an eighth instead, still
//! amortized O(1) (one copy per ~len/8 appends; glibc moves large blocks with `mremap`).

//!
//! A vector that grows moves to a new block and leaves the old one free in the heap, resident
//! until the allocator hands it back. [`push`] counts those bytes (per thread: the pushes of one
//! append happen on the thread that appends), and [`take_left_free`] hands the count to the
//! caller, which decides when enough is free for handing memory back to be worth waking anyone: most appends grow
//! nothing, and a small session's growth frees a few hundred bytes.

use std::cell::Cell;

/// Slots added at least when a full vector grows (a small session grows as `Vec` would).
const MIN_GROWTH: usize = 64;

thread_local! {
    /// Bytes of old blocks that growing vectors left free on this thread, not yet taken.
    static LEFT_FREE: Cell<usize> = const { Cell::new(0) };
}

/// `v.push(x)`, growing a full `v` by an eighth of its length (see the module docs).
pub fn push<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        let (old, bytes) = (v.as_ptr(), v.capacity() * std::mem::size_of::<T>());
        v.reserve_exact((v.len() / 8).max(MIN_GROWTH));
        if bytes > 0 && v.as_ptr() != old {
            LEFT_FREE.with(|n| n.set(n.get().saturating_add(bytes)));
        }
    }
    v.push(x);
}

/// The bytes of old blocks growing vectors left free on this thread since the last call (the
/// count then starts again).
pub fn take_left_free() -> usize {
    LEFT_FREE.with(|n| n.replace(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_full_vector_grows_by_an_eighth_not_twice() {
        let mut v: Vec<u64> = (0..80_000).collect();
        v.shrink_to_fit();
        super::push(&mut v, 1);
        assert_eq!(v.len(), 80_001);
        assert!(
            v.capacity() >= 80_001 && v.capacity() <= 90_000,
            "{}",
            v.capacity()
        );
        // Pushes until then take no new room.
        let room = v.capacity();
        while v.len() < room {
            super::push(&mut v, 2);
        }
        assert_eq!(v.capacity(), room);
    }

    #[test]
    fn the_blocks_growth_leaves_free_are_counted_until_taken() {
        super::take_left_free();
        let mut small: Vec<u64> = Vec::new();
        for i in 0..64 {
            super::push(&mut small, i);
        }
        assert_eq!(super::take_left_free(), 0, "a first block frees nothing");
        let mut big: Vec<u64> = (0..100_000).collect();
        big.shrink_to_fit();
        let before = big.as_ptr();
        super::push(&mut big, 1);
        let freed = super::take_left_free();
        if big.as_ptr() != before {
            assert_eq!(freed, 800_000, "the old block's bytes");
        }
        assert_eq!(super::take_left_free(), 0, "taken");
    }
}
