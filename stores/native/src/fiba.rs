//! The finger B-tree aggregator (FiBA), generic over a monoid.
//!
//! Tangwongsan, Hirzel, Schneider: *Sub-O(log n) Out-of-Order Sliding-Window Aggregation*
//! (the FiBA paper: Fig. 7-9 insert/evict/query, Fig. 10 range query) and *Out-of-Order
//! Sliding-Window Aggregation with Efficient Bulk Evictions and Insertions* (the bulk paper: bulk
//! evict). The window is a time-ordered sequence of entries `(t, partial)` with distinct
//! times; an insert at an existing time combines into that entry (older partial first).
//!
//! Nodes live in one arena (`Vec<Node>`, `u32` indices) with parent links; the tree keeps
//! fingers to the leftmost (`lf`) and rightmost (`rf`) leaf. Arity (entries + 1) of a non-root
//! node is in `MIN_ARITY..=MAX_ARITY`, `MAX_ARITY = 2 * MIN_ARITY` for inner nodes and
//! `MAX_PER_MIN * MIN_ARITY` (or `with_arity`'s) for leaves; rebalancing happens after
//! the fact (split on overflow, merge or move on underflow). Each node stores the paper's
//! position-aware partial aggregate (`c_i` children, `v_i` entries, `up` = whole subtree):
//!
//! - the root: its inner aggregate `v_0 up(c_1) ... up(c_{a-2}) v_{a-2}` (a leaf root: all);
//! - a left-spine node: `v_0 up(c_1) ... v_{a-2} up(c_{a-1})` then `agg(parent)` unless the
//!   parent is the root; so `agg(lf)` covers the root's first subtree;
//! - a right-spine node: `agg(parent)` unless the parent is the root, then
//!   `up(c_0) v_0 ... v_{a-2}`; so `agg(rf)` covers the root's last subtree;
//! - any other node: `up(c_0) v_0 ... v_{a-2} up(c_{a-1})`.
//!
//! So `query` is `agg(lf) agg(root) agg(rf)`: two combines. A change repairs the up
//! aggregates from the changed node to the first spine node (or the root), then walks down
//! that spine to its finger; the root's term is in no spine node, so a change of the root
//! costs one recomputation. Each node also keeps `cnt`, the number of entries its aggregate
//! covers, so `len` is O(1) and exact after bulk evictions.
//!
//! Costs (`m` entries evicted in bulk, `d` distance from the nearer end): insert/evict
//! amortized O(log d), O(1) at the ends; bulk_evict amortized O(log m) (subtrees cut off go
//! to a deferred free list, the bulk paper §4.3, released one node per allocation); query O(1);
//! query_range O(log n); `suffixes` (nested windows ending at the youngest entry, in one walk
//! from the right finger) O(log d) per start d entries back; bulk_insert a loop of inserts
//! (O(m log d), O(m) in order).

use crate::compact_vec::CompactVec;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Event time (milliseconds in the worker).
pub type Time = i64;
type Idx = u32;
const NIL: Idx = u32::MAX;

/// A leaf's MAX_ARITY over MIN_ARITY in `FiBA::new` (inner nodes: 2). At 4, a right-spine
/// leaf that overflows keeps `MAX_ARITY - MIN_ARITY` entries (12 of 15 at MIN_ARITY 4) when
/// in-order appends split it (`cut`), so a tree filled in order has its leaves 80 % full,
/// where 2 leaves them half full; inner nodes stay small because a change below refolds them.
pub const MAX_PER_MIN: usize = 4;

/// The capacity the repair's work lists keep between operations.
const SCRATCH: usize = 64;

/// Below this many slots a node's arena and an end leaf's entry buffers grow by half (not
/// double), so that a key with few entries reserves few spare slots.
const SMALL: usize = 16;

thread_local! {
    /// The repair's work lists, shared by the thread's trees between operations (a tree holds
    /// its dirty list only while an operation runs): no tree keeps scratch capacity.
    static DIRTY: Cell<Vec<Idx>> = const { Cell::new(Vec::new()) };
    static HEAP: Cell<BinaryHeap<Reverse<(u8, Idx)>>> = const { Cell::new(BinaryHeap::new()) };
}

/// An associative operation with a neutral element (lift and lower live outside the tree).
///
/// The tree stores partials in the monoid's stored form `S` (a compact encoding of `P`, or
/// `P` itself) and combines them there; `P` is what its API takes and returns.
pub trait Monoid {
    /// The partial aggregate.
    type P: Clone;
    /// The form the tree stores a partial in.
    type S: Clone;
    /// The partial of the empty window.
    fn identity(&self) -> Self::P;
    /// The partial of window `a` followed by window `b`.
    fn combine(&self, a: &Self::P, b: &Self::P) -> Self::P;
    /// Whether two partials are the same value (floats: the same bits), for the checker.
    fn same(&self, a: &Self::P, b: &Self::P) -> bool;
    /// `p` in stored form.
    fn pack(&self, p: &Self::P) -> Self::S;
    /// The partial a stored form holds: `unpack(pack(p))` is `p`.
    fn unpack(&self, s: &Self::S) -> Self::P;
    /// `combine` in stored form.
    fn combine_stored(&self, a: &Self::S, b: &Self::S) -> Self::S {
        self.pack(&self.combine(&self.unpack(a), &self.unpack(b)))
    }
    /// `identity` in stored form.
    fn identity_stored(&self) -> Self::S {
        self.pack(&self.identity())
    }
    /// `same` in stored form.
    fn same_stored(&self, a: &Self::S, b: &Self::S) -> bool {
        self.same(&self.unpack(a), &self.unpack(b))
    }
}

/// A tree's memory by kind (`FiBA::footprint`): what the heap holds for it, not counting the
/// allocator's own headers (`blocks` heap blocks, 8-16 bytes each with glibc).
#[derive(Clone, Copy, Debug, Default)]
pub struct Footprint {
    /// Entries held.
    pub entries: usize,
    /// Live nodes, and of those leaves.
    pub nodes: usize,
    pub leaves: usize,
    /// Entry slots reserved in the nodes (entries + separators + spare capacity).
    pub slots: usize,
    /// The tree's own struct.
    pub tree: usize,
    /// The node arena (every node struct, live, free or spare capacity).
    pub arena: usize,
    /// Times and partials of the slots reserved.
    pub entry_bytes: usize,
    /// Child links and the free and dirty lists.
    pub kid_bytes: usize,
    /// Spine caches outside the node structs (suffix folds).
    pub cache_bytes: usize,
    /// Heap blocks.
    pub blocks: usize,
}

impl Footprint {
    /// Bytes in all, allocator headers counted as 16 bytes per block.
    pub fn bytes(&self) -> usize {
        self.tree
            + self.arena
            + self.entry_bytes
            + self.kid_bytes
            + self.cache_bytes
            + 16 * self.blocks
    }
}

/// A node: 88 bytes with `sum,count,max` partials (its buffers' headers `CompactVec`s, its
/// count `u32`: a key's tree holds far fewer than 2^32 entries, 140 GB of them).
struct Node<P> {
    times: CompactVec<Time>,
    vals: CompactVec<P>,
    kids: CompactVec<Idx>,
    agg: P,
    parent: Idx,
    cnt: u32,
    height: u8,
    left: bool,
    right: bool,
    alive: bool,
    mark: bool,
}

/// The caches of the spine node below the root at one side and height (there is one such
/// node at a time): kept by the tree, not in every node, since only O(log n) nodes need them.
struct Spine<P> {
    /// The node they are up to date for; another node (or NIL) means out of date.
    owner: Idx,
    /// The node's own sequence folded (without the parent's term) and its count.
    local: P,
    local_cnt: u32,
    /// A left-spine node's suffix folds, youngest first: for the left finger
    /// `suffix[k - 1 - i]` folds its entries from `i` on; for an inner node
    /// `suffix[k - 1 - i]` is `v_i up(c_{i+1}) ... v_{k-1} up(c_k)`. So dropping the oldest
    /// entry (and the child after it) pops the last fold, and the next is the new own fold.
    suffix: CompactVec<P>,
}

/// The finger B-tree aggregator over monoid `M`.
pub struct FiBA<M: Monoid> {
    m: M,
    nodes: CompactVec<Node<M::S>>,
    free: CompactVec<Idx>,
    root: Idx,
    lf: Idx,
    rf: Idx,
    min_arity: u16,
    max_arity: u16,
    combines: AtomicU64,
    /// The nodes a running operation changed (empty between operations; see `DIRTY`).
    dirty: CompactVec<Idx>,
    /// The spine caches by height, left and right: `2 * height + side`.
    spines: CompactVec<Spine<M::S>>,
}

fn kn_first<P>(nodes: &[Node<P>], idx: Idx) -> Option<&Idx> {
    nodes[idx as usize].kids.first()
}

fn kn_last<P>(nodes: &[Node<P>], idx: Idx) -> Option<&Idx> {
    nodes[idx as usize].kids.last()
}

/// A count as a node stores it.
fn narrow(cnt: usize) -> u32 {
    u32::try_from(cnt).expect("a tree of fewer than 2^32 entries")
}

fn lower_bound(times: &[Time], t: Time) -> usize {
    times.partition_point(|&x| x < t)
}

fn upper_bound(times: &[Time], t: Time) -> usize {
    times.partition_point(|&x| x <= t)
}

impl<M: Monoid> FiBA<M> {
    /// An empty window; `min_arity` >= 2; leaves up to `MAX_PER_MIN` times that.
    pub fn new(m: M, min_arity: usize) -> Self {
        Self::with_arity(m, min_arity, MAX_PER_MIN * min_arity)
    }

    /// An empty window with MIN_ARITY `min_arity` >= 2 and MAX_ARITY `max_arity` >= twice
    /// that (what amortized O(1) rebalancing needs) in the leaves, which hold the entries;
    /// inner nodes have MAX_ARITY `2 * min_arity`.
    pub fn with_arity(m: M, min_arity: usize, max_arity: usize) -> Self {
        assert!(min_arity >= 2, "min_arity must be at least 2");
        assert!(
            max_arity >= 2 * min_arity,
            "max_arity must be at least 2 * min_arity"
        );
        let mut tree = FiBA {
            m,
            nodes: CompactVec::new(),
            free: CompactVec::new(),
            root: NIL,
            lf: NIL,
            rf: NIL,
            min_arity: u16::try_from(min_arity).expect("min_arity fits 16 bits"),
            max_arity: u16::try_from(max_arity).expect("max_arity fits 16 bits"),
            combines: AtomicU64::new(0),
            dirty: CompactVec::new(),
            spines: CompactVec::new(),
        };
        tree.reset();
        tree
    }

    fn reset(&mut self) {
        self.nodes.clear();
        self.free.clear();
        for c in self.spines.iter_mut() {
            c.owner = NIL;
        }
        let root = self.alloc(0);
        self.root = root;
        self.lf = root;
        self.rf = root;
    }

    /// The monoid.
    pub fn monoid(&self) -> &M {
        &self.m
    }

    /// MIN_ARITY.
    pub fn min_arity(&self) -> usize {
        self.min_arity as usize
    }

    /// MAX_ARITY.
    pub fn max_arity(&self) -> usize {
        self.max_arity as usize
    }

    /// Combines performed since creation or the last `reset_combines`.
    pub fn combines(&self) -> u64 {
        self.combines.load(Relaxed)
    }

    /// Reset the combine counter.
    pub fn reset_combines(&self) {
        self.combines.store(0, Relaxed);
    }

    /// The most entries of a node at `height`: MAX_ARITY - 1 in a leaf, 2 * MIN_ARITY - 1
    /// in an inner node (whose aggregate a change below refolds: O(arity) combines).
    fn max_entries(&self, height: u8) -> usize {
        if height == 0 {
            self.max_arity as usize - 1
        } else {
            2 * self.min_arity as usize - 1
        }
    }

    fn min_entries(&self) -> usize {
        self.min_arity as usize - 1
    }

    /// Note changed nodes for the operation's `repair`; the list's buffer comes from the
    /// thread's (`DIRTY`) at the first note.
    fn mark_dirty(&mut self, ids: &[Idx]) {
        if self.dirty.capacity() == 0 {
            self.dirty = DIRTY.take().into();
        }
        for &id in ids {
            self.dirty.push(id);
        }
    }

    fn comb(&self, a: &M::S, b: &M::S) -> M::S {
        self.count_combine();
        self.m.combine_stored(a, b)
    }

    fn count_combine(&self) {
        // a load and a store, not an atomic add: one thread mutates a tree at a time
        self.combines
            .store(self.combines.load(Relaxed) + 1, Relaxed);
    }

    /// A fresh node; reuses a node of the deferred free list, whose children (a subtree cut
    /// off by a bulk eviction) join the list: O(1) per allocation.
    fn alloc(&mut self, height: u8) -> Idx {
        let identity = self.m.identity_stored();
        if let Some(idx) = self.free.pop() {
            self.invalidate(idx);
            let kids = std::mem::take(&mut self.nodes[idx as usize].kids);
            self.free.extend(kids.iter().copied());
            let node = &mut self.nodes[idx as usize];
            node.parent = NIL;
            node.times.clear();
            node.vals.clear();
            node.kids = kids;
            node.kids.clear();
            node.agg = identity;
            node.cnt = 0;
            node.height = height;
            node.left = false;
            node.right = false;
            node.alive = true;
            node.mark = false;
            return idx;
        }
        if self.nodes.len() == self.nodes.capacity() {
            // by half while small, then to the next power of two (what doubling reserves)
            let cap = self.nodes.capacity();
            let grown = if cap < SMALL {
                cap + (cap / 2).max(1)
            } else {
                (cap + 1).next_power_of_two()
            };
            self.nodes.reserve_exact(grown - cap);
        }
        self.nodes.push(Node {
            parent: NIL,
            times: CompactVec::new(),
            vals: CompactVec::new(),
            kids: CompactVec::new(),
            agg: identity,
            cnt: 0,
            height,
            left: false,
            right: false,
            alive: true,
            mark: false,
        });
        (self.nodes.len() - 1) as Idx
    }

    fn release(&mut self, idx: Idx) {
        let node = &mut self.nodes[idx as usize];
        node.alive = false;
        self.free.push(idx);
    }

    fn n(&self, idx: Idx) -> &Node<M::S> {
        &self.nodes[idx as usize]
    }

    fn nm(&mut self, idx: Idx) -> &mut Node<M::S> {
        &mut self.nodes[idx as usize]
    }

    /// Spine node `idx`'s side (0 left, 1 right; None: the root or no spine node).
    fn side(&self, idx: Idx) -> Option<usize> {
        let node = self.n(idx);
        if node.parent == NIL {
            None
        } else if node.left {
            Some(0)
        } else if node.right {
            Some(1)
        } else {
            None
        }
    }

    /// Spine node `idx`'s caches, if up to date.
    fn cache(&self, idx: Idx) -> Option<&Spine<M::S>> {
        let side = self.side(idx)?;
        let height = self.n(idx).height as usize;
        self.spines
            .get(2 * height + side)
            .filter(|c| c.owner == idx)
    }

    /// Spine node `idx`'s caches, if up to date, to change.
    fn cache_mut(&mut self, idx: Idx) -> Option<&mut Spine<M::S>> {
        let side = self.side(idx)?;
        let height = self.n(idx).height as usize;
        self.spines
            .get_mut(2 * height + side)
            .filter(|c| c.owner == idx)
    }

    /// Mark the caches `idx` owns out of date.
    fn invalidate(&mut self, idx: Idx) {
        let height = self.n(idx).height as usize;
        for side in 0..2 {
            if let Some(c) = self.spines.get_mut(2 * height + side) {
                if c.owner == idx {
                    c.owner = NIL;
                }
            }
        }
    }

    /// The slot of spine node `idx`'s caches (made if new), whatever it holds.
    fn slot(&mut self, idx: Idx) -> &mut Spine<M::S> {
        let side = self.side(idx).expect("a spine node below the root");
        let height = self.n(idx).height as usize;
        let at = 2 * height + side;
        if self.spines.len() <= at {
            self.spines.reserve_exact(at + 1 - self.spines.len());
        }
        while self.spines.len() <= at {
            let local = self.m.identity_stored();
            self.spines.push(Spine {
                owner: NIL,
                local,
                local_cnt: 0,
                suffix: CompactVec::new(),
            });
        }
        &mut self.spines[at]
    }

    /// Room for one more entry at an end of leaf `idx` (a finger): a full buffer grows by
    /// half below `SMALL` slots, up to the most a leaf holds before it splits, else doubles.
    #[inline]
    fn room_at_end(&mut self, idx: Idx) {
        let node = self.n(idx);
        if node.times.len() == node.times.capacity() {
            self.grow_end(idx);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow_end(&mut self, idx: Idx) {
        let most = self.max_entries(0) + 1;
        let node = self.nm(idx);
        let len = node.times.len();
        let extra = if len < SMALL {
            (len / 2).max(1).min(most.saturating_sub(len).max(1))
        } else {
            len
        };
        node.times.reserve_exact(extra);
        node.vals.reserve_exact(extra);
    }

    /// Room for one more entry (and child) in `idx`: a full buffer of exact size (what an
    /// in-order split leaves) grows by a quarter, not double.
    fn room(&mut self, idx: Idx) {
        let node = self.nm(idx);
        let extra = (node.times.len() / 4).max(1);
        if node.times.len() == node.times.capacity() {
            node.times.reserve_exact(extra);
        }
        if node.vals.len() == node.vals.capacity() {
            node.vals.reserve_exact(extra);
        }
        if !node.kids.is_empty() && node.kids.len() == node.kids.capacity() {
            node.kids.reserve_exact(extra);
        }
    }

    fn is_leaf(&self, idx: Idx) -> bool {
        self.n(idx).kids.is_empty()
    }

    // --- observers --------------------------------------------------------------------------

    /// Number of entries (distinct times). O(1).
    pub fn len(&self) -> usize {
        let root = self.n(self.root);
        if root.kids.is_empty() {
            root.cnt as usize
        } else {
            self.n(self.lf).cnt as usize + root.cnt as usize + self.n(self.rf).cnt as usize
        }
    }

    /// Whether the window is empty. O(1).
    pub fn is_empty(&self) -> bool {
        self.n(self.rf).times.is_empty()
    }

    /// The smallest time, if any. O(1).
    pub fn oldest(&self) -> Option<Time> {
        self.n(self.lf).times.first().copied()
    }

    /// The largest time, if any. O(1).
    pub fn youngest(&self) -> Option<Time> {
        self.n(self.rf).times.last().copied()
    }

    /// The partial aggregate of the whole window: two combines (none for a leaf root).
    pub fn query(&self) -> M::P {
        let root = self.n(self.root);
        if root.kids.is_empty() {
            return self.m.unpack(&root.agg);
        }
        let left = self.comb(&self.n(self.lf).agg, &root.agg);
        self.m.unpack(&self.comb(&left, &self.n(self.rf).agg))
    }

    /// The partial stored at `t`, if any. O(log d).
    pub fn get(&self, t: Time) -> Option<M::P> {
        if self.is_empty() {
            return None;
        }
        let (node, i, found) = self.search(t);
        found.then(|| self.m.unpack(&self.n(node).vals[i]))
    }

    /// All `(t, partial)` entries in time order. O(n).
    pub fn items(&self) -> Vec<(Time, M::P)> {
        let mut out = Vec::with_capacity(self.len());
        self.walk(self.root, &mut out);
        out
    }

    /// The times below `t` in order (the entries a `bulk_evict(t - 1)` removes). O(log n + m).
    pub fn times_before(&self, t: Time) -> Vec<Time> {
        let mut out = Vec::new();
        self.walk_times(self.root, t, &mut out);
        out
    }

    fn walk_times(&self, idx: Idx, t: Time, out: &mut Vec<Time>) -> bool {
        let node = self.n(idx);
        for (i, &x) in node.times.iter().enumerate() {
            if !node.kids.is_empty() && !self.walk_times(node.kids[i], t, out) {
                return false;
            }
            if x >= t {
                return false;
            }
            out.push(x);
        }
        match node.kids.last() {
            Some(&last) => self.walk_times(last, t, out),
            None => true,
        }
    }

    fn walk(&self, idx: Idx, out: &mut Vec<(Time, M::P)>) {
        let node = self.n(idx);
        for (i, (&t, v)) in node.times.iter().zip(&node.vals).enumerate() {
            if !node.kids.is_empty() {
                self.walk(node.kids[i], out);
            }
            out.push((t, self.m.unpack(v)));
        }
        if let Some(&last) = node.kids.last() {
            self.walk(last, out);
        }
    }

    /// Finger search: the node holding `t` and its index (found), or the leaf and the
    /// position where `t` belongs. Climbs from the finger on `t`'s side of the root's first
    /// separator to the lowest spine node whose range holds `t`, then descends: O(log d).
    fn search(&self, t: Time) -> (Idx, usize, bool) {
        let mut node = self.root;
        let root = self.n(self.root);
        if !root.kids.is_empty() {
            if t > root.times[0] {
                node = self.rf;
                while self.n(node).parent != NIL {
                    let parent = self.n(node).parent;
                    if t > *self.n(parent).times.last().expect("inner node has entries") {
                        break;
                    }
                    node = parent;
                }
            } else {
                node = self.lf;
                while self.n(node).parent != NIL {
                    let parent = self.n(node).parent;
                    if t < self.n(parent).times[0] {
                        break;
                    }
                    node = parent;
                }
            }
        }
        loop {
            let n = self.n(node);
            let i = lower_bound(&n.times, t);
            if i < n.times.len() && n.times[i] == t {
                return (node, i, true);
            }
            if n.kids.is_empty() {
                return (node, i, false);
            }
            node = n.kids[i];
        }
    }

    // --- aggregates -------------------------------------------------------------------------

    /// `[c_0] v_0 c_1 ... v_{k-1} [c_k]` folded, with the count it covers.
    fn fold_node(&self, idx: Idx, skip_first: bool, skip_last: bool) -> (Option<M::S>, usize) {
        let node = self.n(idx);
        let k = node.times.len();
        let mut acc: Option<M::S> = None;
        let mut cnt = k;
        let push = |acc: &mut Option<M::S>, x: &M::S| {
            *acc = Some(match acc.take() {
                None => x.clone(),
                Some(a) => self.comb(&a, x),
            });
        };
        if node.kids.is_empty() {
            for v in &node.vals {
                push(&mut acc, v);
            }
            return (acc, cnt);
        }
        for i in 0..=k {
            if !((i == 0 && skip_first) || (i == k && skip_last)) {
                let kid = self.n(node.kids[i]);
                push(&mut acc, &kid.agg);
                cnt += kid.cnt as usize;
            }
            if i < k {
                push(&mut acc, &node.vals[i]);
            }
        }
        (acc, cnt)
    }

    /// The own sequence of spine node `idx` folded (without the parent's term) with its
    /// count; for the left finger (a leaf below the root) from the right, with every suffix.
    fn spine_local(&self, idx: Idx, buffer: Vec<M::S>) -> (M::S, usize, Option<Vec<M::S>>) {
        let node = self.n(idx);
        if node.left {
            let k = node.vals.len();
            let mut suffix = buffer;
            suffix.clear();
            suffix.reserve_exact(k); // the largest k seen, not a doubling's spare slots
            let mut cnt = k;
            let mut acc: Option<M::S> = None;
            for i in (0..k).rev() {
                if let Some(&kid) = node.kids.get(i + 1) {
                    let kn = self.n(kid);
                    cnt += kn.cnt as usize;
                    acc = Some(match acc {
                        None => kn.agg.clone(),
                        Some(a) => self.comb(&kn.agg, &a),
                    });
                }
                let v = &node.vals[i];
                let folded = match acc {
                    None => v.clone(),
                    Some(a) => self.comb(v, &a),
                };
                suffix.push(folded.clone());
                acc = Some(folded);
            }
            let local = acc.unwrap_or_else(|| self.m.identity_stored());
            return (local, cnt, Some(suffix));
        }
        let (local, cnt) = self.fold_node(idx, node.left, node.right && !node.left);
        (local.unwrap_or_else(|| self.m.identity_stored()), cnt, None)
    }

    /// A spine node's aggregate from its own fold and its parent's aggregate.
    fn with_parent(&self, idx: Idx, local: &M::S, cnt: usize) -> (M::S, usize) {
        let node = self.n(idx);
        let p = self.n(node.parent);
        if p.parent == NIL {
            (local.clone(), cnt)
        } else if node.left {
            (self.comb(local, &p.agg), cnt + p.cnt as usize)
        } else {
            (self.comb(&p.agg, local), cnt + p.cnt as usize)
        }
    }

    /// The position-aware aggregate of `idx` recomputed from its entries, its children's
    /// and (on a spine below the root's children) its parent's aggregate: what the checker
    /// expects, and what a repair stores.
    fn expected(&self, idx: Idx) -> (M::S, usize) {
        let node = self.n(idx);
        if node.parent == NIL {
            let (agg, cnt) = self.fold_node(idx, true, true);
            return (agg.unwrap_or_else(|| self.m.identity_stored()), cnt);
        }
        if !(node.left || node.right) {
            let (agg, cnt) = self.fold_node(idx, false, false);
            return (agg.unwrap_or_else(|| self.m.identity_stored()), cnt);
        }
        let (local, cnt, _) = self.spine_local(idx, Vec::new());
        self.with_parent(idx, &local, cnt)
    }

    /// Recompute `idx` whole (a spine node: its own fold and caches too).
    fn recalc(&mut self, idx: Idx) {
        let node = self.n(idx);
        if node.parent == NIL || !(node.left || node.right) {
            let (agg, cnt) = self.expected(idx);
            let node = self.nm(idx);
            node.agg = agg;
            node.cnt = narrow(cnt);
            return;
        }
        let buffer = std::mem::take(&mut self.slot(idx).suffix).into_vec();
        let (local, local_cnt, suffix) = self.spine_local(idx, buffer);
        let (agg, cnt) = self.with_parent(idx, &local, local_cnt);
        let node = self.nm(idx);
        node.agg = agg;
        node.cnt = narrow(cnt);
        let slot = self.slot(idx);
        slot.owner = idx;
        slot.suffix = suffix.unwrap_or_default().into();
        slot.local = local;
        slot.local_cnt = narrow(local_cnt);
    }

    /// A spine node whose parent's aggregate changed, its own fold not: one combine.
    fn refresh(&mut self, idx: Idx) {
        let Some(c) = self.cache(idx) else {
            return self.recalc(idx);
        };
        let (agg, cnt) = self.with_parent(idx, &c.local, c.local_cnt as usize);
        let node = self.nm(idx);
        node.agg = agg;
        node.cnt = narrow(cnt);
    }

    /// Repair every aggregate after changes at the nodes of `self.dirty`: non-spine nodes
    /// bottom-up (each pushing its parent), then the root, then each spine from its highest
    /// changed node down to its finger.
    fn repair(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty).into_vec();
        let mut heap = HEAP.take();
        for &idx in &dirty {
            let node = self.nm(idx);
            if node.alive && !node.mark {
                node.mark = true;
                heap.push(Reverse((node.height, idx)));
            }
        }
        dirty.clear();
        dirty.shrink_to(SCRATCH); // a bulk insert's list would stay with the thread
        DIRTY.set(dirty);
        let mut left_top: Option<Idx> = None;
        let mut right_top: Option<Idx> = None;
        let mut root_dirty = false;
        while let Some(Reverse((_, idx))) = heap.pop() {
            self.nm(idx).mark = false;
            let node = self.n(idx);
            if node.parent == NIL {
                root_dirty = true;
            } else if node.left {
                left_top = Some(idx); // heights only grow: the last one is the highest
                self.invalidate(idx);
            } else if node.right {
                right_top = Some(idx);
                self.invalidate(idx);
            } else {
                let parent = node.parent;
                self.recalc(idx);
                let p = self.nm(parent);
                if !p.mark {
                    p.mark = true;
                    heap.push(Reverse((p.height, parent)));
                }
            }
        }
        heap.shrink_to(SCRATCH);
        HEAP.set(heap);
        if root_dirty {
            self.recalc(self.root);
        }
        if let Some(mut idx) = left_top {
            loop {
                self.refresh(idx);
                match self.n(idx).kids.first() {
                    Some(&kid) => idx = kid,
                    None => break,
                }
            }
        }
        if let Some(mut idx) = right_top {
            loop {
                self.refresh(idx);
                match self.n(idx).kids.last() {
                    Some(&kid) => idx = kid,
                    None => break,
                }
            }
        }
    }

    // --- rebalancing --------------------------------------------------------------------------

    fn child_index(&self, parent: Idx, kid: Idx) -> usize {
        self.n(parent)
            .kids
            .iter()
            .position(|&k| k == kid)
            .expect("a child is among its parent's children")
    }

    /// Cut the overflowing node `idx` in two around a separator, which it returns: the
    /// entries (and children) before it stay in `idx`, those after it move to the fresh node
    /// `z` (whose parent links follow). A right-spine node (in-order appends overflow it) keeps
    /// all but `min_entries` and leaves the spine nearly full: its buffers, sized for growth, go
    /// to `z`, the new spine node, and its own part moves to buffers of its exact size; any
    /// other node is cut in the middle, both halves in buffers of their exact size.
    fn cut(&mut self, idx: Idx, z: Idx) -> (Time, M::S) {
        let min_entries = self.min_entries();
        let node = self.nm(idx);
        let len = node.times.len();
        let inner = !node.kids.is_empty();
        let (sep_t, sep_v, times, vals, kids) = if node.right {
            let mid = len - 1 - min_entries;
            let older_t = node.times[..mid].to_vec();
            let older_v = node.vals[..mid].to_vec();
            let older_k = if inner {
                node.kids[..=mid].to_vec()
            } else {
                Vec::new()
            };
            let (sep_t, sep_v) = (node.times[mid], node.vals[mid].clone());
            node.times.remove_range(..=mid);
            node.vals.remove_range(..=mid);
            if inner {
                node.kids.remove_range(..=mid);
            }
            let times = std::mem::replace(&mut node.times, older_t.into());
            let vals = std::mem::replace(&mut node.vals, older_v.into());
            let kids = std::mem::replace(&mut node.kids, older_k.into());
            (sep_t, sep_v, times, vals, kids)
        } else {
            let mid = len / 2;
            let times = CompactVec::from(node.times.take_range(mid + 1..));
            let vals = CompactVec::from(node.vals.take_range(mid + 1..));
            let kids = if inner {
                CompactVec::from(node.kids.take_range(mid + 1..))
            } else {
                CompactVec::new()
            };
            let sep_t = node.times.pop().expect("mid entry");
            let sep_v = node.vals.pop().expect("mid entry");
            // the half kept is its own size: a root leaf split as in-order appends filled it
            // would keep half its slots spare for good (a middle cut is rarer than an append)
            node.times.shrink_to_fit();
            node.vals.shrink_to_fit();
            node.kids.shrink_to_fit();
            (sep_t, sep_v, times, vals, kids)
        };
        let right = node.right;
        node.right = false;
        for &kid in &kids {
            self.nm(kid).parent = z;
        }
        let zn = self.nm(z);
        zn.times = times;
        zn.vals = vals;
        zn.kids = kids;
        zn.right = right;
        (sep_t, sep_v)
    }

    /// Split overflowing nodes from `idx` upwards (amortized O(1) per insert).
    fn split_up(&mut self, mut idx: Idx) {
        while self.n(idx).times.len() > self.max_entries(self.n(idx).height) {
            let height = self.n(idx).height;
            let z = self.alloc(height);
            let (sep_t, sep_v) = self.cut(idx, z);
            let parent = self.n(idx).parent;
            if self.rf == idx {
                self.rf = z;
            }
            if parent == NIL {
                let r = self.alloc(height + 1);
                {
                    let rn = self.nm(r);
                    rn.times.push(sep_t);
                    rn.vals.push(sep_v);
                    rn.kids.push(idx);
                    rn.kids.push(z);
                }
                self.nm(idx).parent = r;
                self.nm(idx).left = true;
                self.nm(z).parent = r;
                self.nm(z).right = true;
                self.root = r;
                self.mark_dirty(&[idx, z, r]);
                return;
            }
            let j = self.child_index(parent, idx);
            self.room(parent);
            {
                let pn = self.nm(parent);
                pn.times.insert(j, sep_t);
                pn.vals.insert(j, sep_v);
                pn.kids.insert(j + 1, z);
            }
            self.nm(z).parent = parent;
            self.mark_dirty(&[idx, z, parent]);
            idx = parent;
        }
    }

    /// The in-order split of an overflowing right finger whose parent has room and (unless it
    /// is the root) an up-to-date own fold: the finger's older half `l` becomes an up node
    /// and the parent's own fold (the root: its inner aggregate) is extended by
    /// `up(l) ⊗ separator`, two combines: the same left fold a recomputation would do, without
    /// refolding the parent. False (nothing changed) when the general path must split.
    fn split_right_finger(&mut self) -> bool {
        let l = self.rf;
        let parent = self.n(l).parent;
        if parent == NIL {
            return false;
        }
        let p = self.n(parent);
        let root = p.parent == NIL;
        if p.times.len() >= self.max_entries(p.height)
            || !(root || (p.right && self.cache(parent).is_some()))
        {
            return false;
        }
        let z = self.alloc(0);
        let (sep_t, sep_v) = self.cut(l, z);
        self.nm(z).parent = parent;
        self.rf = z;
        let (up, up_cnt) = self.fold_node(l, false, false);
        let up = up.expect("a split half has entries");
        {
            let ln = self.nm(l);
            ln.agg = up.clone();
            ln.cnt = narrow(up_cnt);
        }
        let (own, own_cnt) = match self.cache(parent) {
            Some(c) if !root => (&c.local, c.local_cnt),
            _ => (&self.n(parent).agg, self.n(parent).cnt),
        };
        let own = self.comb(&self.comb(own, &up), &sep_v);
        let own_cnt = own_cnt as usize + up_cnt + 1;
        let pn = self.nm(parent);
        pn.times.push(sep_t);
        pn.vals.push(sep_v);
        pn.kids.push(z);
        if root {
            pn.agg = own;
            pn.cnt = narrow(own_cnt);
        } else {
            let (agg, cnt) = self.with_parent(parent, &own, own_cnt);
            let pn = self.nm(parent);
            pn.agg = agg;
            pn.cnt = narrow(cnt);
            let c = self.cache_mut(parent).expect("up to date");
            c.local = own;
            c.local_cnt = narrow(own_cnt);
        }
        self.recalc(z);
        true
    }

    /// Fix an underflowing non-root node by merging with or moving entries from a sibling,
    /// upwards while parents underflow; collapse an empty inner root. Returns nothing; every
    /// changed node goes to `self.dirty`.
    fn fix_up(&mut self, mut idx: Idx) {
        loop {
            let parent = self.n(idx).parent;
            if parent == NIL {
                self.collapse_root();
                return;
            }
            if self.n(idx).times.len() >= self.min_entries() {
                return;
            }
            let j = self.child_index(parent, idx);
            let kids_len = self.n(parent).kids.len();
            let (a, b, si) = if j + 1 < kids_len {
                (idx, self.n(parent).kids[j + 1], j)
            } else {
                (self.n(parent).kids[j - 1], idx, j - 1)
            };
            let (la, lb) = (self.n(a).times.len(), self.n(b).times.len());
            if la + 1 + lb <= self.max_entries(self.n(a).height) {
                self.merge(parent, a, b, si);
            } else if a == idx {
                self.move_left(parent, a, b, si, self.min_entries() - la);
            } else {
                self.move_right(parent, a, b, si, self.min_entries() - lb);
            }
            self.mark_dirty(&[a, b, parent]);
            idx = parent;
        }
    }

    /// `a`, separator `si` of `parent` and `b` (right of `a`) become `a`.
    fn merge(&mut self, parent: Idx, a: Idx, b: Idx, si: usize) {
        let (sep_t, sep_v) = {
            let pn = self.nm(parent);
            pn.kids.remove(si + 1);
            (pn.times.remove(si), pn.vals.remove(si))
        };
        let (mut times, mut vals, mut kids, right) = {
            let bn = self.nm(b);
            (
                std::mem::take(&mut bn.times),
                std::mem::take(&mut bn.vals),
                std::mem::take(&mut bn.kids),
                bn.right,
            )
        };
        for &kid in &kids {
            self.nm(kid).parent = a;
        }
        let an = self.nm(a);
        an.times.push(sep_t);
        an.vals.push(sep_v);
        an.times.append(&mut times);
        an.vals.append(&mut vals);
        an.kids.append(&mut kids);
        an.right = right;
        let bn = self.nm(b); // b keeps its (empty) buffers for its next use
        bn.times = times;
        bn.vals = vals;
        bn.kids = kids;
        if self.rf == b {
            self.rf = a;
        }
        self.release(b);
    }

    /// Move `count` entries (and children) from the front of `b` through the separator to `a`.
    fn move_left(&mut self, parent: Idx, a: Idx, b: Idx, si: usize, count: usize) {
        let (mut times, mut vals, kids) = {
            let bn = self.nm(b);
            let times = bn.times.take_range(..count);
            let vals = bn.vals.take_range(..count);
            let kids = if bn.kids.is_empty() {
                Vec::new()
            } else {
                bn.kids.take_range(..count)
            };
            (times, vals, kids)
        };
        // separator goes down to a, the last moved entry goes up
        let new_t = times.pop().expect("count >= 1");
        let new_v = vals.pop().expect("count >= 1");
        let (sep_t, sep_v) = {
            let pn = self.nm(parent);
            (
                std::mem::replace(&mut pn.times[si], new_t),
                std::mem::replace(&mut pn.vals[si], new_v),
            )
        };
        for &kid in &kids {
            self.nm(kid).parent = a;
        }
        let an = self.nm(a);
        an.times.push(sep_t);
        an.vals.push(sep_v);
        an.times.extend(times);
        an.vals.extend(vals);
        an.kids.extend(kids);
    }

    /// Move `count` entries (and children) from the back of `a` through the separator to `b`.
    fn move_right(&mut self, parent: Idx, a: Idx, b: Idx, si: usize, count: usize) {
        let (mut times, mut vals, kids) = {
            let an = self.nm(a);
            let from = an.times.len() - count;
            let times = an.times.take_range(from..);
            let vals = an.vals.take_range(from..);
            let kids = if an.kids.is_empty() {
                Vec::new()
            } else {
                let from = an.kids.len() - count;
                an.kids.take_range(from..)
            };
            (times, vals, kids)
        };
        let new_t = times.remove(0);
        let new_v = vals.remove(0);
        let (sep_t, sep_v) = {
            let pn = self.nm(parent);
            (
                std::mem::replace(&mut pn.times[si], new_t),
                std::mem::replace(&mut pn.vals[si], new_v),
            )
        };
        for &kid in &kids {
            self.nm(kid).parent = b;
        }
        times.push(sep_t);
        vals.push(sep_v);
        let bn = self.nm(b);
        bn.times.prepend(times);
        bn.vals.prepend(vals);
        if !kids.is_empty() {
            bn.kids.prepend(kids);
        }
    }

    /// While the root is an inner node without entries, its only child becomes the root.
    fn collapse_root(&mut self) {
        while !self.is_leaf(self.root) && self.n(self.root).times.is_empty() {
            let old = self.root;
            let kid = self.nm(old).kids.pop().expect("one child");
            self.release(old);
            let kn = self.nm(kid);
            kn.parent = NIL;
            kn.left = false;
            kn.right = false;
            self.root = kid;
            self.mark_dirty(&[kid]);
            // the spines below a new root lose their parent term
            if let (Some(&first), Some(&last)) =
                (kn_first(&self.nodes, kid), kn_last(&self.nodes, kid))
            {
                self.mark_dirty(&[first, last]);
            }
        }
    }

    #[inline]
    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(error) = self.check_invariants() {
            panic!("FiBA invariant broken: {error}");
        }
    }

    // --- updates ------------------------------------------------------------------------------

    /// Add `p` at time `t` (combined after an existing entry at `t`). Amortized O(log d); one
    /// combine at the young end (in order), one at the old end.
    pub fn insert(&mut self, t: Time, p: M::P) {
        let p = self.m.pack(&p);
        let rf = self.rf;
        let root = self.root;
        let young = self.n(rf).times.last().copied();
        match young {
            None => {
                self.room_at_end(root);
                let node = self.nm(root);
                node.times.push(t);
                node.vals.push(p.clone());
                node.agg = p;
                node.cnt = 1;
            }
            Some(y) if t > y => {
                self.room_at_end(rf);
                let agg = self.comb(&self.n(rf).agg, &p);
                let node = self.nm(rf);
                node.times.push(t);
                node.vals.push(p);
                node.agg = agg;
                node.cnt += 1;
                let overflow = node.times.len() > self.max_entries(0);
                self.invalidate(rf);
                if overflow && !self.split_right_finger() {
                    self.split_up(rf);
                    self.repair();
                }
            }
            Some(_) if t < self.n(self.lf).times[0] => {
                let lf = self.lf;
                self.room_at_end(lf);
                let agg = self.comb(&p, &self.n(lf).agg);
                let node = self.nm(lf);
                node.times.insert(0, t);
                node.vals.insert(0, p);
                node.agg = agg;
                node.cnt += 1;
                let overflow = node.times.len() > self.max_entries(0);
                self.invalidate(lf);
                if overflow {
                    self.split_up(lf);
                    self.repair();
                }
            }
            Some(_) => {
                let (idx, i, found) = self.search(t);
                if found {
                    let merged = self.comb(&self.n(idx).vals[i], &p);
                    self.nm(idx).vals[i] = merged;
                    self.mark_dirty(&[idx]);
                } else {
                    self.room(idx);
                    let node = self.nm(idx);
                    node.times.insert(i, t);
                    node.vals.insert(i, p);
                    self.mark_dirty(&[idx]);
                    self.split_up(idx);
                }
                self.repair();
            }
        }
        self.debug_check();
    }

    /// Remove the entry at exactly `t`; false when absent. Amortized O(log d); O(MAX_ARITY)
    /// combines at the old end.
    pub fn evict(&mut self, t: Time) -> bool {
        let lf = self.lf;
        let Some(&oldest) = self.n(lf).times.first() else {
            return false;
        };
        if t < oldest || t > self.youngest().expect("not empty") {
            return false;
        }
        let leaf = if t == oldest {
            let (root, min_entries) = (self.root, self.min_entries());
            let node = self.nm(lf);
            node.times.remove(0);
            node.vals.remove(0);
            let left = node.times.len();
            if lf != root && left >= min_entries && self.cache(lf).is_some() {
                let c = self.cache_mut(lf).expect("up to date");
                c.suffix.pop();
                let local = c.suffix.last().expect("entries left").clone();
                c.local = local.clone();
                c.local_cnt = narrow(left);
                let (agg, cnt) = self.with_parent(lf, &local, left);
                let node = self.nm(lf);
                node.agg = agg;
                node.cnt = narrow(cnt);
                self.debug_check();
                return true;
            }
            if lf == root || left >= min_entries {
                self.recalc(lf);
                self.debug_check();
                return true;
            }
            lf
        } else {
            let (idx, i, found) = self.search(t);
            if !found {
                return false;
            }
            if self.is_leaf(idx) {
                let node = self.nm(idx);
                node.times.remove(i);
                node.vals.remove(i);
                idx
            } else {
                // replace by its predecessor, the last entry of the subtree left of it
                let mut leaf = self.n(idx).kids[i];
                while let Some(&kid) = self.n(leaf).kids.last() {
                    leaf = kid;
                }
                let node = self.nm(leaf);
                let pt = node.times.pop().expect("non-root leaves have entries");
                let pv = node.vals.pop().expect("non-root leaves have entries");
                let inner = self.nm(idx);
                inner.times[i] = pt;
                inner.vals[i] = pv;
                self.mark_dirty(&[idx]);
                leaf
            }
        };
        if leaf == self.lf && self.refill_left_finger() {
            self.debug_check();
            return true;
        }
        self.mark_dirty(&[leaf]);
        self.fix_up(leaf);
        self.repair();
        self.release_to_leaf_root();
        self.debug_check();
        true
    }

    /// When evictions left the root a leaf (the whole window in one node), give back the
    /// arena's other nodes (free, or deferred subtrees), the free list and the spine caches:
    /// a key that shrinks to a few entries holds one node again. O(nodes released), each
    /// node released once after it was made: amortized O(1) per allocation.
    fn release_to_leaf_root(&mut self) {
        if !self.is_leaf(self.root) || self.nodes.len() == 1 {
            return;
        }
        self.nodes.swap(0, self.root as usize);
        self.nodes.truncate(1);
        self.nodes.shrink_to_fit();
        (self.root, self.lf, self.rf) = (0, 0, 0);
        self.free = CompactVec::new();
        self.spines = CompactVec::new();
    }

    /// The in-order refill of an underflowing left finger: it merges with its sibling when
    /// the result fits and the parent, a left-spine node below the root with up-to-date
    /// suffix folds, keeps enough entries. The parent's new own fold is its next suffix fold
    /// (popped: no combine, and none of its children read), then one combine for its
    /// parent's term; the finger is refolded. False (nothing changed) when the general path
    /// must fix it.
    fn refill_left_finger(&mut self) -> bool {
        let lf = self.lf;
        let parent = self.n(lf).parent;
        if parent == NIL {
            return false;
        }
        let p = self.n(parent);
        if p.parent == NIL || !p.left || p.times.len() <= self.min_entries() {
            return false;
        }
        if self.cache(parent).is_none() {
            return false;
        }
        let b = p.kids[1];
        let (la, bn) = (self.n(lf).times.len(), self.n(b));
        if la + 1 + bn.times.len() > self.max_entries(0) {
            return false;
        }
        let gone = bn.cnt + 1; // the sibling's entries and the separator leave the parent's fold
        self.merge(parent, lf, b, 0);
        let c = self.cache_mut(parent).expect("up to date");
        c.suffix.pop();
        let own = c.suffix.last().expect("entries left").clone();
        c.local = own.clone();
        c.local_cnt -= gone;
        let own_cnt = c.local_cnt as usize;
        let (agg, cnt) = self.with_parent(parent, &own, own_cnt);
        let pn = self.nm(parent);
        pn.agg = agg;
        pn.cnt = narrow(cnt);
        self.recalc(lf);
        true
    }

    /// Remove every entry with time <= `t`; returns how many. Seed 003 §4: climb the left
    /// spine to the lowest node whose first separator is above `t`, cut every level below it
    /// along the boundary in one pass down (the subtrees left of it go to the deferred free
    /// list), then fix the underflowing nodes of that path top-down, each with its right
    /// neighbour (a sibling by then), and repair the aggregates. Amortized O(log m).
    pub fn bulk_evict(&mut self, t: Time) -> usize {
        let Some(oldest) = self.oldest() else {
            return 0;
        };
        if t < oldest {
            return 0;
        }
        let before = self.len();
        if t >= self.youngest().expect("not empty") {
            self.reset();
            return before;
        }
        let mut top = self.lf;
        while self.n(top).parent != NIL {
            let parent = self.n(top).parent;
            if self.n(parent).times[0] > t {
                break;
            }
            top = parent;
        }
        let mut path: Vec<Idx> = Vec::new();
        let mut cur = top;
        loop {
            path.push(cur);
            let node = self.nm(cur);
            let i = upper_bound(&node.times, t);
            node.times.remove_range(..i);
            node.vals.remove_range(..i);
            if node.kids.is_empty() {
                break;
            }
            let cut = node.kids.take_range(..i);
            let next = node.kids[0];
            self.free.extend(cut);
            let kid = self.nm(next);
            kid.left = true;
            cur = next;
        }
        self.lf = cur;
        for &idx in &path {
            if self.nodes[idx as usize].alive {
                self.mark_dirty(&[idx]);
                self.fix_up(idx);
            }
        }
        self.repair();
        self.release_to_leaf_root();
        self.debug_check();
        before - self.len()
    }

    /// Insert `(t, p)` pairs in ascending time order, as a loop of inserts would (equal times
    /// combined in the given order). Panics when out of order: callers check first.
    ///
    /// Seed 003 §5 in cost: every pair first goes into its leaf (finger search, splits as
    /// needed) without touching an aggregate; then one repair recomputes each changed node
    /// once, bottom-up, and walks the spines down. The changed nodes are the union of the
    /// pairs' paths, so the combines are O(log d + m (1 + log(d / m))) for m pairs spread
    /// over the youngest d entries, against O(m log d) for m single inserts.
    pub fn bulk_insert(&mut self, pairs: Vec<(Time, M::P)>) {
        for w in pairs.windows(2) {
            assert!(w[0].0 <= w[1].0, "bulk_insert: pairs out of order");
        }
        if pairs.len() <= 1 {
            for (t, p) in pairs {
                self.insert(t, p);
            }
            return;
        }
        for (t, p) in pairs {
            let p = self.m.pack(&p);
            let (idx, i, found) = self.search(t);
            if found {
                let merged = self.comb(&self.n(idx).vals[i], &p);
                self.nm(idx).vals[i] = merged;
            } else {
                self.room(idx);
                let node = self.nm(idx);
                node.times.insert(i, t);
                node.vals.insert(i, p);
                self.split_up(idx);
            }
            if self.dirty.last() != Some(&idx) {
                self.mark_dirty(&[idx]);
            }
        }
        self.repair();
        self.debug_check();
    }

    /// Remove every entry. O(n) deallocation.
    pub fn clear(&mut self) {
        self.reset();
    }

    // --- range query --------------------------------------------------------------------------

    /// The partial of the entries with `lo <= t <= hi` (identity when none). A suffix (`hi`
    /// at or past the youngest time) is `suffixes`' (the same bits as asked with other
    /// starts). Another range, Fig. 10: the subtrees entirely inside the range contribute
    /// their stored up aggregate (spine subtrees, which store none, are descended), folded
    /// left to right; a prefix of d entries starts at the left finger's spine (`range_top`):
    /// O(log d); another range starts at the root: O(log n).
    pub fn query_range(&self, lo: Time, hi: Time) -> M::P {
        if self.youngest().is_some_and(|y| hi >= y) {
            return self.suffixes(&[lo]).pop().expect("one start");
        }
        let mut acc: Option<M::P> = None;
        if hi >= lo && !self.is_empty() {
            self.range(self.range_top(lo, hi), lo, hi, false, false, &mut acc);
        }
        acc.unwrap_or_else(|| self.m.identity())
    }

    /// For each of `starts` (any order, repeats allowed) the partial of the entries with
    /// `t >= start` (the identity when none; the whole `query` when it reaches the oldest),
    /// all in one walk from the right finger: nested windows ending at the youngest entry.
    ///
    /// The walk folds right to left (`piece ⊗ acc`), so each suffix extends the smaller
    /// ones' folds. Its pieces: going up the right spine, each spine node's own fold (cached,
    /// `local`), one combine per level, until the level whose own sequence holds the start;
    /// there its entries and children's up aggregates right of the start, then the same in the
    /// child that holds the start, down to a leaf. A start in the root's sequence begins from
    /// `agg(rf)` (the root's last subtree); a start under the root's first separator from
    /// `agg(root) ⊗ agg(rf)`, then the left spine's cached suffix folds, one combine per level
    /// down to the node holding it. A start's partial is a function of the tree and that
    /// start alone (never of the other starts): nested walks share folds, not associations.
    ///
    /// Cost: O(h) combines for the spine levels (h = the height of the largest start's
    /// level, O(log d) for a start d entries from the young end) plus O(log d_i) per start
    /// below the node where its path leaves the previous start's; a start from scratch costs
    /// the same bound alone, so W nested windows cost one walk's spine and W boundaries.
    pub fn suffixes(&self, starts: &[Time]) -> Vec<M::P> {
        let mut out: Vec<Option<M::P>> = vec![None; starts.len()];
        if let (Some(oldest), Some(youngest)) = (self.oldest(), self.youngest()) {
            let mut order: Vec<(Time, usize)> = Vec::with_capacity(starts.len());
            let mut whole: Option<M::P> = None;
            for (slot, &s) in starts.iter().enumerate() {
                if s <= oldest {
                    out[slot] = Some(whole.get_or_insert_with(|| self.query()).clone());
                } else if s <= youngest {
                    order.push((s, slot));
                }
            }
            order.sort_unstable_by(|a, b| b.cmp(a)); // the youngest start (smallest window) first
            let mut firsts: Vec<(Time, usize)> = Vec::with_capacity(order.len());
            for &(s, slot) in &order {
                if firsts.last().is_none_or(|&(t, _)| t != s) {
                    firsts.push((s, slot));
                }
            }
            if !firsts.is_empty() {
                self.walk_suffixes(&firsts, &mut out);
            }
            for &(s, slot) in &order {
                if out[slot].is_none() {
                    let first = firsts[firsts.partition_point(|&(t, _)| t > s)].1;
                    out[slot] = out[first].clone();
                }
            }
        }
        out.into_iter()
            .map(|p| p.unwrap_or_else(|| self.m.identity()))
            .collect()
    }

    /// `x ⊗ acc` (`acc` None: nothing yet), `x` in stored form.
    fn prepend(&self, x: &M::S, acc: Option<M::P>) -> Option<M::P> {
        let x = self.m.unpack(x);
        Some(match acc {
            None => x,
            Some(a) => {
                self.count_combine();
                self.m.combine(&x, &a)
            }
        })
    }

    /// `suffixes` for distinct starts, descending, each in `(oldest, youngest]`.
    fn walk_suffixes(&self, starts: &[(Time, usize)], out: &mut [Option<M::P>]) {
        let root = self.n(self.root);
        if root.kids.is_empty() {
            return self.fold_right(self.root, 0, 0, false, starts, None, out);
        }
        // the right spine, from the right finger up to the root's last child
        let mut p = 0;
        let mut node = self.rf;
        let mut tail: Option<M::P> = None; // own folds of the spine levels below `node`
        loop {
            let parent = self.n(node).parent;
            let bound = *self.n(parent).times.last().expect("inner node has entries");
            let q = p + starts[p..].partition_point(|&(s, _)| s > bound);
            if q > p {
                let last = self.n(node).kids.len().saturating_sub(2);
                self.fold_right(node, 0, last, true, &starts[p..q], tail.clone(), out);
                p = q;
            }
            if p == starts.len() {
                return;
            }
            if parent == self.root {
                break;
            }
            tail = match self.cache(node) {
                Some(c) => self.prepend(&c.local, tail),
                None => {
                    let (local, _) = self.fold_node(node, false, true);
                    self.prepend(&local.expect("a spine node has entries"), tail)
                }
            };
            node = parent;
        }
        // the root's own sequence: its last subtree is agg(rf)
        let right = Some(self.m.unpack(&self.n(self.rf).agg));
        let first = root.times[0];
        let q = p + starts[p..].partition_point(|&(s, _)| s > first);
        if q > p {
            let last = root.kids.len() - 2;
            self.fold_right(self.root, 1, last, true, &starts[p..q], right.clone(), out);
            p = q;
        }
        if p == starts.len() {
            return;
        }
        // the left spine, from the root's first child down to the left finger
        let mut acc = self.prepend(&root.agg, right);
        let mut node = root.kids[0];
        loop {
            let n = self.n(node);
            let q = p + starts[p..].partition_point(|&(s, _)| s > n.times[0]);
            let computed;
            let folds: &[M::S] = match self.cache(node) {
                Some(c) => &c.suffix,
                None => {
                    computed = self.spine_local(node, Vec::new()).2.expect("left spine");
                    &computed
                }
            };
            let k = n.times.len();
            let mut j = p;
            while j < q {
                // the starts in child `i` (or, in a leaf, before entry `i`)
                let i = lower_bound(&n.times, starts[j].0);
                let below = if i == 0 { i64::MIN } else { n.times[i - 1] };
                let end = j + starts[j..q].partition_point(|&(s, _)| s > below);
                let from_i = if i < k {
                    self.prepend(&folds[k - 1 - i], acc.clone())
                } else {
                    acc.clone()
                };
                match n.kids.get(i) {
                    Some(&kid) => {
                        let last = self.n(kid).kids.len().saturating_sub(1);
                        self.fold_right(kid, 0, last, false, &starts[j..end], from_i, out);
                    }
                    None => {
                        for &(_, slot) in &starts[j..end] {
                            out[slot] = from_i.clone();
                        }
                    }
                }
                j = end;
            }
            p = q;
            if p == starts.len() {
                return;
            }
            acc = self.prepend(&folds[k - 1], acc);
            node = n.kids[0];
        }
    }

    /// Fold node `idx`'s sequence from the right onto `acc` (the fold of what lies right of
    /// it) and set each start's partial as the walk passes it: children `first..=last` with
    /// the entries between them, and `trailing`: the entry after child `last` too (a spine
    /// node's own sequence, whose last child is the spine's). A leaf: all its entries. The
    /// starts are descending and none is above the sequence's last time; a start above
    /// entry `first - 1` is required when `first > 0`.
    #[allow(clippy::too_many_arguments)]
    fn fold_right(
        &self,
        idx: Idx,
        first: usize,
        last: usize,
        trailing: bool,
        starts: &[(Time, usize)],
        mut acc: Option<M::P>,
        out: &mut [Option<M::P>],
    ) {
        let node = self.n(idx);
        let mut p = 0;
        if node.kids.is_empty() {
            for (t, v) in node.times.iter().zip(&node.vals).rev() {
                while p < starts.len() && starts[p].0 > *t {
                    out[starts[p].1] = acc.clone();
                    p += 1;
                }
                if p == starts.len() {
                    return;
                }
                acc = self.prepend(v, acc);
            }
            for &(_, slot) in &starts[p..] {
                out[slot] = acc.clone();
            }
            return;
        }
        if trailing {
            acc = self.prepend(&node.vals[last], acc);
        }
        for j in (first..=last).rev() {
            let q = if j == first {
                starts.len()
            } else {
                let bound = node.times[j - 1];
                p + starts[p..].partition_point(|&(s, _)| s > bound)
            };
            let kid = node.kids[j];
            if q > p {
                let kid_last = self.n(kid).kids.len().saturating_sub(1);
                self.fold_right(kid, 0, kid_last, false, &starts[p..q], acc.clone(), out);
                p = q;
            }
            if p == starts.len() {
                return;
            }
            acc = self.prepend(&self.n(kid).agg, acc);
            acc = self.prepend(&node.vals[j - 1], acc);
        }
    }

    /// Where a range query starts: for a suffix of the window (`hi` at or past the youngest
    /// time) the lowest right-spine node whose subtree holds every entry from `lo` on, found
    /// by climbing from the right finger; for a prefix, the mirror image from the left
    /// finger; else the root. So a suffix or prefix of d entries costs O(log d) combines.
    fn range_top(&self, lo: Time, hi: Time) -> Idx {
        let mut node = self.root;
        if self.youngest().is_some_and(|y| hi >= y) {
            node = self.rf;
            while let Some(parent) = Some(self.n(node).parent).filter(|&p| p != NIL) {
                if lo > *self.n(parent).times.last().expect("inner node has entries") {
                    break;
                }
                node = parent;
            }
        } else if self.oldest().is_some_and(|o| lo <= o) {
            node = self.lf;
            while let Some(parent) = Some(self.n(node).parent).filter(|&p| p != NIL) {
                if hi < self.n(parent).times[0] {
                    break;
                }
                node = parent;
            }
        }
        node
    }

    fn range(
        &self,
        idx: Idx,
        lo: Time,
        hi: Time,
        lo_in: bool,
        hi_in: bool,
        acc: &mut Option<M::P>,
    ) {
        let node = self.n(idx);
        // the sum so far is kept unpacked: one unpack per piece, no pack (the same combines
        // in the same order as in stored form, so the same result)
        let push = |acc: &mut Option<M::P>, x: &M::S| {
            let x = self.m.unpack(x);
            match acc {
                None => *acc = Some(x),
                Some(a) => {
                    self.count_combine();
                    *a = self.m.combine(a, &x);
                }
            }
        };
        if lo_in && hi_in && node.parent != NIL && !node.left && !node.right {
            push(acc, &node.agg);
            return;
        }
        let i0 = if lo_in {
            0
        } else {
            lower_bound(&node.times, lo)
        };
        let i1 = if hi_in {
            node.times.len()
        } else {
            upper_bound(&node.times, hi)
        };
        if node.kids.is_empty() {
            for v in &node.vals[i0..i1.max(i0)] {
                push(acc, v);
            }
            return;
        }
        for j in i0..=i1.max(i0) {
            self.range(node.kids[j], lo, hi, lo_in || j > i0, hi_in || j < i1, acc);
            if j < i1 {
                push(acc, &node.vals[j]);
            }
        }
    }

    // --- memory -------------------------------------------------------------------------------

    /// Where this tree's bytes go (see `Footprint`). O(n / MIN_ARITY).
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint {
            entries: self.len(),
            tree: std::mem::size_of::<Self>(),
            arena: self.nodes.capacity() * std::mem::size_of::<Node<M::S>>(),
            ..Footprint::default()
        };
        for node in &self.nodes {
            f.nodes += usize::from(node.alive);
            f.leaves += usize::from(node.alive && node.kids.is_empty());
            f.slots += node.times.capacity();
            f.entry_bytes += node.times.capacity() * std::mem::size_of::<Time>()
                + node.vals.capacity() * std::mem::size_of::<M::S>();
            f.kid_bytes += node.kids.capacity() * std::mem::size_of::<Idx>();
            let blocks = [
                node.times.capacity(),
                node.vals.capacity(),
                node.kids.capacity(),
            ];
            f.blocks += blocks.iter().filter(|&&c| c > 0).count();
        }
        f.kid_bytes += (self.free.capacity() + self.dirty.capacity()) * std::mem::size_of::<Idx>();
        f.blocks += [self.free.capacity(), self.dirty.capacity()]
            .iter()
            .filter(|&&c| c > 0)
            .count();
        f.cache_bytes += self.spines.capacity() * std::mem::size_of::<Spine<M::S>>();
        f.blocks += usize::from(self.spines.capacity() > 0);
        for c in &self.spines {
            f.cache_bytes += c.suffix.capacity() * std::mem::size_of::<M::S>();
            f.blocks += usize::from(c.suffix.capacity() > 0);
        }
        f
    }

    // --- invariants ---------------------------------------------------------------------------

    /// Verify the whole structure in O(n): heights, order, arity, parent links, spine flags,
    /// fingers, and every node's aggregate and count recomputed from its neighbours' stored
    /// ones. An error names the broken invariant. Its combines are not counted.
    pub fn check_invariants(&self) -> Result<(), String> {
        let combines = self.combines();
        let checked = self.check_tree();
        self.combines.store(combines, Relaxed);
        checked
    }

    fn check_tree(&self) -> Result<(), String> {
        let root = self.n(self.root);
        if root.parent != NIL || root.left || root.right || !root.alive {
            return Err("structure: the root has a parent, a spine flag or is freed".into());
        }
        if !root.kids.is_empty() && root.times.is_empty() {
            return Err("arity: an inner root without entries".into());
        }
        let mut lf = self.root;
        while let Some(&k) = self.n(lf).kids.first() {
            lf = k;
        }
        let mut rf = self.root;
        while let Some(&k) = self.n(rf).kids.last() {
            rf = k;
        }
        if lf != self.lf || rf != self.rf {
            return Err("structure: a finger is not the outermost leaf".into());
        }
        self.check_node(self.root, None, None, false, false)
    }

    fn check_node(
        &self,
        idx: Idx,
        lo: Option<Time>,
        hi: Option<Time>,
        left: bool,
        right: bool,
    ) -> Result<(), String> {
        let node = self.n(idx);
        if !node.alive {
            return Err(format!("structure: node {idx} is freed but linked"));
        }
        if node.left != left || node.right != right {
            return Err(format!("structure: node {idx} has wrong spine flags"));
        }
        if node.vals.len() != node.times.len() {
            return Err(format!(
                "structure: node {idx} has times and values of different lengths"
            ));
        }
        for w in node.times.windows(2) {
            if w[0] >= w[1] {
                return Err(format!("order: node {idx} times not increasing"));
            }
        }
        if let (Some(lo), Some(&first)) = (lo, node.times.first()) {
            if first <= lo {
                return Err(format!("order: node {idx} below its separator"));
            }
        }
        if let (Some(hi), Some(&last)) = (hi, node.times.last()) {
            if last >= hi {
                return Err(format!("order: node {idx} above its separator"));
            }
        }
        let k = node.times.len();
        let max_entries = self.max_entries(node.height);
        if node.parent != NIL && (k < self.min_entries() || k > max_entries) {
            return Err(format!("arity: node {idx} has {k} entries"));
        }
        if node.parent == NIL && k > max_entries {
            return Err(format!("arity: the root has {k} entries"));
        }
        if node.kids.is_empty() {
            if node.height != 0 {
                return Err(format!("height: leaf {idx} at height {}", node.height));
            }
        } else {
            if node.kids.len() != k + 1 {
                return Err(format!(
                    "arity: node {idx} has {} children for {k} entries",
                    node.kids.len()
                ));
            }
            let is_root = node.parent == NIL;
            for (j, &kid) in node.kids.iter().enumerate() {
                let kn = self.n(kid);
                if kn.parent != idx {
                    return Err(format!("structure: node {kid} has a wrong parent link"));
                }
                if kn.height + 1 != node.height {
                    return Err(format!("height: node {kid} is not one level below {idx}"));
                }
                let klo = if j == 0 { lo } else { Some(node.times[j - 1]) };
                let khi = if j == k { hi } else { Some(node.times[j]) };
                let kleft = j == 0 && (is_root || left);
                let kright = j == k && (is_root || right);
                self.check_node(kid, klo, khi, kleft, kright)?;
            }
        }
        let (agg, cnt) = self.expected(idx);
        if cnt != node.cnt as usize {
            return Err(format!(
                "aggregates: node {idx} count {} != {cnt} (height {}, left {}, right {}, root {})",
                node.cnt,
                node.height,
                node.left,
                node.right,
                node.parent == NIL
            ));
        }
        if !self.m.same_stored(&agg, &node.agg) {
            return Err(format!("aggregates: node {idx} has a stale aggregate"));
        }
        if let Some(c) = self.cache(idx) {
            let (local, local_cnt, suffix) = self.spine_local(idx, Vec::new());
            if local_cnt != c.local_cnt as usize || !self.m.same_stored(&local, &c.local) {
                return Err(format!("aggregates: spine node {idx} has a stale own fold"));
            }
            if let Some(suffix) = suffix {
                let cached = &c.suffix;
                if suffix.len() != cached.len()
                    || !suffix
                        .iter()
                        .zip(cached)
                        .all(|(a, b)| self.m.same_stored(a, b))
                {
                    return Err("aggregates: the left finger's suffix folds are stale".into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Integer sum (also the monoid of `windows.rs`' tests).
    #[derive(Clone)]
    pub(crate) struct Sum;
    impl Monoid for Sum {
        type P = i64;
        type S = i64;
        fn pack(&self, p: &i64) -> i64 {
            *p
        }
        fn unpack(&self, s: &i64) -> i64 {
            *s
        }
        fn identity(&self) -> i64 {
            0
        }
        fn combine(&self, a: &i64, b: &i64) -> i64 {
            a + b
        }
        fn same(&self, a: &i64, b: &i64) -> bool {
            a == b
        }
    }

    /// String concatenation of single letters: non-commutative.
    struct Concat;
    impl Monoid for Concat {
        type P = String;
        type S = String;
        fn pack(&self, p: &String) -> String {
            p.clone()
        }
        fn unpack(&self, s: &String) -> String {
            s.clone()
        }
        fn identity(&self) -> String {
            String::new()
        }
        fn combine(&self, a: &String, b: &String) -> String {
            format!("{a}{b}")
        }
        fn same(&self, a: &String, b: &String) -> bool {
            a == b
        }
    }

    /// A small deterministic generator (no dependency).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn oracle_range(
        model: &std::collections::BTreeMap<Time, String>,
        lo: Time,
        hi: Time,
    ) -> String {
        if hi < lo {
            return String::new();
        }
        model.range(lo..=hi).map(|(_, v)| v.as_str()).collect()
    }

    #[test]
    fn random_operations_match_an_ordered_map() {
        for seed in 1..40u64 {
            let mut rng = Rng(seed * 7919);
            let min_arity = 2 + (seed % 3) as usize;
            let max_arity = min_arity * (2 + (seed / 3 % 3) as usize);
            let mut tree = FiBA::with_arity(Concat, min_arity, max_arity);
            let mut model = std::collections::BTreeMap::<Time, String>::new();
            let mut next = 0i64;
            for _ in 0..400 {
                match rng.below(10) {
                    0..=2 => {
                        next += 1 + rng.below(3) as i64;
                        let s = ((b'a' + rng.below(26) as u8) as char).to_string();
                        tree.insert(next, s.clone());
                        model.entry(next).or_default().push_str(&s);
                    }
                    3 | 4 => {
                        let t = next - rng.below(40) as i64;
                        let s = ((b'a' + rng.below(26) as u8) as char).to_string();
                        tree.insert(t, s.clone());
                        model.entry(t).or_default().push_str(&s);
                    }
                    5 => {
                        let t = match model.keys().next() {
                            Some(&t) => t,
                            None => 0,
                        };
                        assert_eq!(tree.evict(t), model.remove(&t).is_some());
                    }
                    6 => {
                        let t = next - rng.below(50) as i64;
                        assert_eq!(tree.evict(t), model.remove(&t).is_some());
                    }
                    7 => {
                        let t = next - 20 - rng.below(30) as i64;
                        let gone: Vec<Time> = model.range(..=t).map(|(&k, _)| k).collect();
                        for k in &gone {
                            model.remove(k);
                        }
                        assert_eq!(tree.bulk_evict(t), gone.len());
                    }
                    8 => {
                        let base = next - rng.below(30) as i64;
                        let pairs: Vec<(Time, String)> = (0..rng.below(12))
                            .map(|i| (base + (i as i64) / 2, "x".to_string()))
                            .collect();
                        for (t, s) in &pairs {
                            model.entry(*t).or_default().push_str(s);
                        }
                        tree.bulk_insert(pairs);
                    }
                    _ => {
                        let lo = next - rng.below(60) as i64;
                        let hi = lo + rng.below(60) as i64 - 5;
                        assert_eq!(tree.query_range(lo, hi), oracle_range(&model, lo, hi));
                    }
                }
                tree.check_invariants().unwrap();
                let all: String = model.values().map(String::as_str).collect();
                assert_eq!(tree.query(), all);
                assert_eq!(tree.len(), model.len());
                assert_eq!(tree.oldest(), model.keys().next().copied());
                assert_eq!(tree.youngest(), model.keys().last().copied());
            }
        }
    }

    fn in_order_round_cost(n: i64) -> f64 {
        let mut tree = FiBA::new(Sum, 4);
        for t in 0..n {
            tree.insert(t, 1);
        }
        let rounds = 4096;
        tree.reset_combines();
        for t in n..n + rounds {
            tree.evict(t - n);
            tree.insert(t, 1);
            assert_eq!(tree.query(), n);
        }
        tree.combines() as f64 / rounds as f64
    }

    #[test]
    fn in_order_rounds_cost_the_same_at_any_size() {
        let (small, large) = (in_order_round_cost(1 << 6), in_order_round_cost(1 << 12));
        assert!(large <= small * 1.3, "{small} vs {large}");
    }

    /// `sum,count,max` as the worker's windows hold it.
    fn scm() -> crate::monoids::Fields<3> {
        use crate::monoids::{Fields, Kind, Spec};
        Fields {
            spec: std::sync::Arc::new(Spec::new(&[Kind::Count, Kind::Sum, Kind::Max])),
        }
    }

    /// Entries of the leaves between the fingers, in order.
    fn inner_leaf_sizes<M: Monoid>(tree: &FiBA<M>) -> Vec<usize> {
        let mut sizes = Vec::new();
        let mut stack = vec![tree.root];
        while let Some(idx) = stack.pop() {
            let node = tree.n(idx);
            if node.kids.is_empty() {
                if idx != tree.lf && idx != tree.rf {
                    sizes.push(node.times.len());
                }
            } else {
                stack.extend(node.kids.iter().rev());
            }
        }
        sizes
    }

    #[test]
    fn in_order_appends_leave_the_nodes_they_split_nearly_full() {
        for (min_arity, max_arity) in [(2, 4), (3, 9), (4, 16), (8, 32)] {
            let mut streamed = FiBA::with_arity(Sum, min_arity, max_arity);
            for t in 0..3000 {
                streamed.insert(t, 1);
            }
            let mut loaded = FiBA::with_arity(Sum, min_arity, max_arity);
            loaded.bulk_insert((0..3000).map(|t| (t, 1)).collect());
            for tree in [&streamed, &loaded] {
                let sizes = inner_leaf_sizes(tree);
                assert!(sizes.len() > 10);
                // the right finger keeps MIN_ARITY - 1 entries of each split, the rest stay
                let full = max_arity - min_arity;
                assert!(
                    sizes.iter().all(|&k| k == full),
                    "{min_arity}/{max_arity}: {:?}",
                    &sizes[..8]
                );
            }
        }
    }

    #[test]
    fn a_key_s_tree_struct_and_nodes_are_small() {
        use crate::monoids::{Fields, Packed};
        // a worker holds a tree struct per key (in its windows' map slot) and an arena slot
        // per node: buffer headers of 16 bytes (`CompactVec`), `u32` counts, `u8` heights,
        // `u16` arities (120, 136 and 64 bytes before)
        assert_eq!(std::mem::size_of::<Node<Packed<3>>>(), 88);
        assert_eq!(std::mem::size_of::<FiBA<Fields<3>>>(), 96);
        assert_eq!(std::mem::size_of::<Spine<Packed<3>>>(), 56);
    }

    #[test]
    fn in_order_appends_leave_spare_slots_in_the_right_finger_and_inner_nodes_only() {
        use crate::monoids::Val;
        let p = [Val::Int(1), Val::Float(2.0), Val::Float(3.0)];
        for n in [20, 37, 100, 1000] {
            let mut tree = FiBA::new(scm(), 4);
            for t in 0..n {
                tree.insert(t, p);
            }
            // the first leaf, cut in the middle when the root leaf overflowed, kept the
            // root's 16 slots for 8 entries before
            for (idx, node) in tree.nodes.iter().enumerate() {
                if node.alive && node.kids.is_empty() && idx as Idx != tree.rf {
                    assert_eq!(node.times.capacity(), node.times.len(), "{n}: leaf {idx}");
                    assert_eq!(node.vals.capacity(), node.vals.len(), "{n}: leaf {idx}");
                }
            }
        }
    }

    #[test]
    fn footprint_of_sum_count_max_per_entry() {
        use crate::monoids::Val;
        let p = [Val::Int(1), Val::Float(2.0), Val::Float(3.0)];
        let n = 1000;
        let mut streamed = FiBA::new(scm(), 4);
        for t in 0..n {
            streamed.insert(t, p);
        }
        let mut loaded = FiBA::new(scm(), 4);
        loaded.bulk_insert((0..n).map(|t| (t, p)).collect());
        // one event in five up to 16 entries late, as the interleaved keys of a partition
        let mut rng = Rng(7);
        let mut late = FiBA::new(scm(), 4);
        for i in 0..n {
            let back = if rng.below(5) == 0 {
                rng.below(16) as i64
            } else {
                0
            };
            late.insert(4 * (i - back) + 1 + 2 * i64::from(back > 0), p);
        }
        // a sliding window in its steady state: as many evicted at the old end as appended
        let mut slid = FiBA::new(scm(), 4);
        for t in 0..3 * n {
            slid.insert(t, p);
            if t >= n {
                slid.evict(t - n);
            }
        }
        let trees = [
            ("stream", &streamed),
            ("restore", &loaded),
            ("late", &late),
            ("slid", &slid),
        ];
        for (name, tree) in trees {
            let f = tree.footprint();
            let per = |b: usize| b as f64 / f.entries as f64;
            eprintln!(
                "{name}: {:.1} B/entry: arena {:.1}, entries {:.1} ({} slots), kids {:.1}, caches {:.1}, \
                 headers {:.1}; {} nodes, {} leaves",
                per(f.bytes()),
                per(f.arena),
                per(f.entry_bytes),
                f.slots,
                per(f.kid_bytes),
                per(f.cache_bytes),
                per(16 * f.blocks),
                f.nodes,
                f.leaves
            );
            assert!(f.bytes() <= 64 * f.entries, "{name}: {f:?}");
        }
    }

    #[test]
    fn a_tree_evicted_down_to_one_leaf_gives_its_other_nodes_back() {
        use crate::monoids::Val;
        let p = [Val::Int(1), Val::Float(2.0), Val::Float(3.0)];
        let (mut single, mut bulk) = (FiBA::new(scm(), 4), FiBA::new(scm(), 4));
        for t in 0..1000 {
            single.insert(t, p);
            bulk.insert(t, p);
        }
        // 5 entries: fewer than two leaves of MIN_ARITY - 1 and a separator, so one leaf
        for t in 0..995 {
            single.evict(t);
        }
        bulk.bulk_evict(994);
        for tree in [&mut single, &mut bulk] {
            let f = tree.footprint();
            assert_eq!((f.entries, f.nodes), (5, 1));
            // one node struct, its 16 slots and the tree struct: 1,000 entries' arena is gone
            assert!(f.bytes() <= 1000, "{f:?}");
            for t in 1000..1100 {
                tree.insert(t, p); // and it grows again
            }
            assert_eq!(tree.len(), 105);
            assert!(tree.check_invariants().is_ok());
        }
    }

    #[test]
    fn bulk_evict_costs_far_fewer_combines_than_entries() {
        let mut tree = FiBA::new(Sum, 4);
        for t in 0..1 << 12 {
            tree.insert(t, 1);
        }
        tree.reset_combines();
        assert_eq!(tree.bulk_evict(1023), 1024);
        assert!(tree.combines() < 200, "{}", tree.combines());
        assert_eq!(tree.query(), (1 << 12) - 1024);
    }

    /// Concatenation that spells its association: `combine(a, b)` is `(ab)`; `same` ignores
    /// the parentheses (the tree's checks compare contents, the tests whole strings).
    struct Paren;
    impl Monoid for Paren {
        type P = String;
        type S = String;
        fn pack(&self, p: &String) -> String {
            p.clone()
        }
        fn unpack(&self, s: &String) -> String {
            s.clone()
        }
        fn identity(&self) -> String {
            String::new()
        }
        fn combine(&self, a: &String, b: &String) -> String {
            match (a.is_empty(), b.is_empty()) {
                (true, _) => b.clone(),
                (_, true) => a.clone(),
                _ => format!("({a}{b})"),
            }
        }
        fn same(&self, a: &String, b: &String) -> bool {
            let bare = |x: &String| x.replace(['(', ')'], "");
            bare(a) == bare(b)
        }
    }

    /// Starts around and inside `[oldest, youngest]`, with repeats.
    fn some_starts(rng: &mut Rng, oldest: Time, youngest: Time) -> Vec<Time> {
        let span = (youngest - oldest + 3) as u64;
        (0..1 + rng.below(5))
            .map(|_| oldest - 1 + rng.below(span) as i64)
            .collect()
    }

    #[test]
    fn nested_suffixes_match_an_ordered_map_and_single_queries() {
        for seed in 1..30u64 {
            let mut rng = Rng(seed * 104729);
            let min_arity = 2 + (seed % 3) as usize;
            let max_arity = min_arity * (2 + (seed / 3 % 3) as usize);
            let mut tree = FiBA::with_arity(Concat, min_arity, max_arity);
            let mut shape = FiBA::with_arity(Paren, min_arity, max_arity);
            let mut model = std::collections::BTreeMap::<Time, String>::new();
            let mut next = 0i64;
            for _ in 0..300 {
                let letter = ((b'a' + rng.below(26) as u8) as char).to_string();
                match rng.below(8) {
                    0..=3 => {
                        next += 1 + rng.below(3) as i64;
                        tree.insert(next, letter.clone());
                        shape.insert(next, letter.clone());
                        model.entry(next).or_default().push_str(&letter);
                    }
                    4 => {
                        let t = next - rng.below(60) as i64;
                        tree.insert(t, letter.clone());
                        shape.insert(t, letter.clone());
                        model.entry(t).or_default().push_str(&letter);
                    }
                    5 => {
                        if let Some(&t) = model.keys().next() {
                            model.remove(&t);
                            tree.evict(t);
                            shape.evict(t);
                        }
                    }
                    6 => {
                        let t = next - 40 - rng.below(60) as i64;
                        model.retain(|&k, _| k > t);
                        tree.bulk_evict(t);
                        shape.bulk_evict(t);
                    }
                    _ => {
                        let base = next - rng.below(30) as i64;
                        let pairs: Vec<(Time, String)> = (0..rng.below(9))
                            .map(|i| (base + (i as i64) / 2, letter.clone()))
                            .collect();
                        for (t, x) in &pairs {
                            model.entry(*t).or_default().push_str(x);
                        }
                        tree.bulk_insert(pairs.clone());
                        shape.bulk_insert(pairs);
                    }
                }
                let (Some(oldest), Some(youngest)) = (tree.oldest(), tree.youngest()) else {
                    continue;
                };
                let starts = some_starts(&mut rng, oldest, youngest);
                let got = tree.suffixes(&starts);
                let spelled = shape.suffixes(&starts);
                for (i, &lo) in starts.iter().enumerate() {
                    assert_eq!(got[i], oracle_range(&model, lo, youngest), "seed {seed}");
                    // one start's association is the same asked alone, or as a range
                    assert_eq!(
                        spelled[i],
                        shape.suffixes(&[lo])[0],
                        "seed {seed} start {lo}"
                    );
                    assert_eq!(spelled[i], shape.query_range(lo, youngest + 7));
                }
                tree.check_invariants().unwrap();
            }
        }
    }

    /// The combines of `W` nested windows of the youngest `sizes` entries of an in-order tree
    /// of `n`: asked together, each alone, and by the left-to-right range walk (Fig. 10).
    fn nested_costs(n: i64, sizes: &[i64]) -> (u64, u64, u64) {
        use crate::monoids::Val;
        let mut tree = FiBA::new(scm(), 4);
        let partial = |t: i64| [Val::Int(1), Val::Int(1), Val::Int(t)];
        tree.bulk_insert((0..n - 64).map(|t| (t, partial(t))).collect());
        for t in n - 64..n {
            tree.insert(t, partial(t)); // the young end as in-order events leave it
        }
        let starts: Vec<Time> = sizes.iter().map(|d| n - d).collect();
        tree.reset_combines();
        let together = tree.suffixes(&starts);
        let walk = tree.combines();
        tree.reset_combines();
        for (i, &s) in starts.iter().enumerate() {
            assert!(tree.m.same(&tree.suffixes(&[s])[0], &together[i]));
        }
        let alone = tree.combines();
        tree.reset_combines();
        for (i, &s) in starts.iter().enumerate() {
            let mut acc = None;
            tree.range(tree.range_top(s, n), s, n, false, false, &mut acc);
            let acc = acc.expect("entries");
            assert!(matches!(acc[0], Val::Int(c) if c == sizes[i]));
        }
        (walk, alone, tree.combines())
    }

    #[test]
    fn nested_windows_cost_one_walk_and_o_log_d_per_boundary() {
        let (walk, alone, left_to_right) = nested_costs(1 << 14, &[100, 1000]);
        eprintln!("n = 2^14, windows of 100 and 1000: {walk} together, {alone} alone, {left_to_right} left to right");
        assert!(
            walk < alone && 2 * walk < left_to_right,
            "{walk} {alone} {left_to_right}"
        );
        // at a fixed distance, the tree's size does not matter: O(log d), not O(log n)
        let (small, _, _) = nested_costs(1 << 12, &[64, 640]);
        let (large, _, _) = nested_costs(1 << 16, &[64, 640]);
        assert!(large <= small + 4, "{small} vs {large}");
        // a third boundary costs its own descent, about log d combines, not a new walk
        let (three, alone, left_to_right) = nested_costs(1 << 14, &[100, 300, 1000]);
        eprintln!("n = 2^14, windows of 100, 300 and 1000: {three} together, {alone} alone, {left_to_right} left to right");
        let bound = 4.0 * (300f64).log2();
        assert!(((three - walk) as f64) < bound, "{walk} -> {three}");
    }
}
