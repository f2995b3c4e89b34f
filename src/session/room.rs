//! How the vectors a session keeps one slot per entry in grow on an append.
//!
//! An open session's per-entry vectors (the tree's entries and parents, the branch, the agent
//! context, the running totals along the branch) are built at exactly the room they take, and
//! kept for as long as the session is open. `Vec::push` doubles a full vector: the first append
//! to a 72k-entry session would make each of them twice its size, some 5 MB more per 100 MB
//! session for the rest of its life. [`push`] grows a full vector by an eighth instead, still
//! amortized O(1) (one copy per ~len/8 appends; glibc moves large blocks with `mremap`).

/// Slots added at least when a full vector grows (a small session grows as `Vec` would).
const MIN_GROWTH: usize = 64;

/// `v.push(x)`, growing a full `v` by an eighth of its length (see the module docs).
pub fn push<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 8).max(MIN_GROWTH));
    }
    v.push(x);
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
}
