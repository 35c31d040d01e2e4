//! The window store's coalesced local writes of one partition (`stores.window_store.
//! _OpenPartition.pending`, the native twin of `stores.pending_writes.PyPendingWrites`): per
//! entry `(key prefix, time)` its latest operation since the last write-out, a put (its
//! partial bytes, and whether it is *fresh*: first put at a time after the store's horizon, so
//! not in the local copy) or a delete. The store's native writes (`store_writes`) note each
//! effect here with no Python object: one lookup of the key prefix (few, so in cache), one hash
//! of `(key index, time)`, the bytes in an arena (written over the old ones when they fit, as a
//! rewritten entry's usually do); no allocation per entry. A write-out takes the whole content
//! sorted in entry id order (`SortedWrites`), leaving it empty.

use crate::state_codec::{Arena, Fx, Span, CHUNK};
use crate::store_writes::TIME_BIAS;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// An entry's latest operation.
#[derive(Clone, Copy)]
pub enum Slot {
    /// Its partial bytes; `fresh`: not in the local copy (deleting it drops it).
    Put { span: Span, fresh: bool },
    /// Deleted (the local copy may hold it).
    Delete,
}

/// The pending writes of a partition: see the module doc.
#[derive(Default)]
pub struct PendingWrites {
    prefixes: HashMap<Vec<u8>, u32, Fx>,
    keys: Vec<Vec<u8>>,
    slots: HashMap<(u32, i64), Slot, Fx>,
    arena: Arena,
    /// Bytes of the puts present: the arena is compacted once it holds over twice that.
    live: usize,
}

/// One operation of a write-out: key index, time, the put's bytes (None: a delete).
type Op = (u32, i64, Option<Span>);

/// An entry as `PendingWrites::items` gives it: its id, its bytes (None: a delete), fresh.
pub type Item<'a> = (Vec<u8>, Option<&'a [u8]>, bool);

impl PendingWrites {
    fn key_index(&mut self, prefix: &[u8]) -> u32 {
        if let Some(&index) = self.prefixes.get(prefix) {
            return index;
        }
        let index = self.keys.len() as u32;
        self.prefixes.insert(prefix.to_vec(), index);
        self.keys.push(prefix.to_vec());
        index
    }

    /// Number of entries with an operation.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Entry `(prefix, time)` is now `value`; `fresh`: its time is after the horizon (it
    /// becomes fresh; a fresh entry stays so). O(1).
    pub fn put(&mut self, prefix: &[u8], time: i64, value: &[u8], fresh: bool) {
        let index = self.key_index(prefix);
        let arena = &mut self.arena;
        match self.slots.entry((index, time)) {
            Entry::Occupied(mut slot) => {
                let (span, was_fresh) = match *slot.get() {
                    Slot::Put { span, fresh } => {
                        self.live -= span.len();
                        let span = arena
                            .overwrite(span, value)
                            .unwrap_or_else(|| arena.push(value));
                        (span, fresh)
                    }
                    Slot::Delete => (arena.push(value), false),
                };
                slot.insert(Slot::Put {
                    span,
                    fresh: was_fresh || fresh,
                });
            }
            Entry::Vacant(slot) => {
                slot.insert(Slot::Put {
                    span: arena.push(value),
                    fresh,
                });
            }
        }
        self.live += value.len();
        if self.arena.used() > 2 * self.live + CHUNK {
            self.compact();
        }
    }

    /// Entry `(prefix, time)` is deleted (`stores.pending_writes.forget`): dropped if fresh,
    /// else a delete. O(1).
    pub fn forget(&mut self, prefix: &[u8], time: i64) {
        let index = self.key_index(prefix);
        match self.slots.entry((index, time)) {
            Entry::Occupied(mut slot) => match *slot.get() {
                Slot::Put { span, fresh } => {
                    self.live -= span.len();
                    if fresh {
                        slot.remove();
                    } else {
                        slot.insert(Slot::Delete);
                    }
                }
                Slot::Delete => {}
            },
            Entry::Vacant(slot) => {
                slot.insert(Slot::Delete);
            }
        }
    }

    /// Entry `(prefix, time)` expired (the caller deletes it from the local copy by a range):
    /// dropped; true unless it was fresh (the local copy may hold it). O(1).
    pub fn expire(&mut self, prefix: &[u8], time: i64) -> bool {
        let Some(&index) = self.prefixes.get(prefix) else {
            return true;
        };
        match self.slots.remove(&(index, time)) {
            Some(Slot::Put { span, fresh }) => {
                self.live -= span.len();
                !fresh
            }
            Some(Slot::Delete) | None => true,
        }
    }

    /// Copy the puts' bytes into a fresh arena, dropping what overwrites and removals left.
    /// O(entries), once the arena doubled: amortized O(1) per byte written.
    fn compact(&mut self) {
        let mut fresh = Arena::default();
        for slot in self.slots.values_mut() {
            if let Slot::Put { span, .. } = slot {
                *span = fresh.push(self.arena.get(*span));
            }
        }
        self.arena = fresh;
    }

    /// The entries `(key index, time, slot)` in entry id order: the key prefixes ranked as
    /// bytes, then the times as their biased (big-endian) bytes. O(p log p).
    fn ordered(&self) -> Vec<(u32, i64, Slot)> {
        let mut by_bytes: Vec<u32> = (0..self.keys.len() as u32).collect();
        by_bytes.sort_unstable_by(|&a, &b| self.keys[a as usize].cmp(&self.keys[b as usize]));
        let mut rank = vec![0u32; self.keys.len()];
        for (r, &k) in by_bytes.iter().enumerate() {
            rank[k as usize] = r as u32;
        }
        let mut items: Vec<(u32, i64, Slot)> =
            self.slots.iter().map(|(&(k, t), &s)| (k, t, s)).collect();
        items.sort_unstable_by_key(|&(k, t, _)| (rank[k as usize], (t as u64) ^ TIME_BIAS));
        items
    }

    /// `(entry id, bytes or None for a delete, fresh)` of every entry, in entry id order.
    pub fn items(&self) -> Vec<Item<'_>> {
        self.ordered()
            .into_iter()
            .map(|(k, t, slot)| {
                let mut eid = Vec::new();
                entry_id_of(&mut eid, &self.keys[k as usize], t);
                match slot {
                    Slot::Put { span, fresh } => (eid, Some(self.arena.get(span)), fresh),
                    Slot::Delete => (eid, None, false),
                }
            })
            .collect()
    }

    /// The operations in entry id order, leaving this empty. O(p log p).
    pub fn take(&mut self) -> SortedOps {
        let ops = self
            .ordered()
            .into_iter()
            .map(|(k, t, slot)| match slot {
                Slot::Put { span, .. } => (k, t, Some(span)),
                Slot::Delete => (k, t, None),
            })
            .collect();
        let taken = std::mem::take(self);
        SortedOps {
            keys: taken.keys,
            ops,
            arena: taken.arena,
        }
    }
}

/// `prefix + biased time`: an entry id.
fn entry_id_of(out: &mut Vec<u8>, prefix: &[u8], time: i64) {
    out.extend_from_slice(prefix);
    out.extend_from_slice(&((time as u64) ^ TIME_BIAS).to_be_bytes());
}

/// A write-out's operations in entry id order (`PendingWrites::take`).
pub struct SortedOps {
    keys: Vec<Vec<u8>>,
    ops: Vec<Op>,
    arena: Arena,
}

impl SortedOps {
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Operation `i`: its entry id written into `eid` (cleared first), its bytes (None: a
    /// delete).
    pub fn get(&self, i: usize, eid: &mut Vec<u8>) -> Option<&[u8]> {
        let (k, t, span) = self.ops[i];
        eid.clear();
        entry_id_of(eid, &self.keys[k as usize], t);
        span.map(|s| self.arena.get(s))
    }
}

#[cfg(feature = "python")]
pub mod python {
    //! `stores._native.PendingWrites` and `SortedWrites`.
    use super::{PendingWrites, SortedOps};
    use pyo3::exceptions::PyIndexError;
    use pyo3::prelude::*;
    use pyo3::types::PyBytes;

    type Item = (Py<PyBytes>, Option<Py<PyBytes>>);

    /// The coalesced local writes of a partition since the last write-out (see the module
    /// doc); written by `write_effects`, `write_evictions` and `write_expirations`.
    #[pyclass(module = "stores._native", name = "PendingWrites")]
    #[derive(Default)]
    pub struct PyPendingWrites {
        pub(crate) inner: PendingWrites,
    }

    #[pymethods]
    impl PyPendingWrites {
        #[new]
        fn new() -> Self {
            Self::default()
        }

        fn __len__(&self) -> usize {
            self.inner.len()
        }

        /// `[(entry id, partial bytes or None for a delete)]` in entry id order. O(p log p).
        fn items(&self, py: Python<'_>) -> Vec<Item> {
            self.inner
                .items()
                .into_iter()
                .map(|(eid, value, _)| {
                    (
                        PyBytes::new(py, &eid).unbind(),
                        value.map(|v| PyBytes::new(py, v).unbind()),
                    )
                })
                .collect()
        }

        /// The fresh entries' ids (not in the local copy) in entry id order. O(p log p).
        fn fresh_ids(&self, py: Python<'_>) -> Vec<Py<PyBytes>> {
            self.inner
                .items()
                .into_iter()
                .filter(|&(_, _, fresh)| fresh)
                .map(|(eid, _, _)| PyBytes::new(py, &eid).unbind())
                .collect()
        }

        /// The operations in entry id order (a `SortedWrites`), leaving this empty.
        fn take(&mut self) -> SortedWrites {
            SortedWrites {
                ops: self.inner.take(),
            }
        }
    }

    /// A write-out's operations (`WindowStore._write_out`) in entry id order (RocksDB's
    /// memtable takes sorted keys about twice as fast), written into WriteBatches piece by
    /// piece (`fill`) with no interpreter loop around the calls; an id's and a put's bytes
    /// are made as each operation is written. O(1) per operation.
    #[pyclass(module = "stores._native", name = "SortedWrites", frozen, sequence)]
    pub struct SortedWrites {
        ops: SortedOps,
    }

    #[pymethods]
    impl SortedWrites {
        fn __len__(&self) -> usize {
            self.ops.len()
        }

        /// `(entry id, partial bytes or None)` at `index` (in entry id order).
        fn __getitem__(&self, py: Python<'_>, index: usize) -> PyResult<Item> {
            if index >= self.ops.len() {
                return Err(PyIndexError::new_err("index out of range"));
            }
            let mut eid = Vec::new();
            let value = self.ops.get(index, &mut eid);
            Ok((
                PyBytes::new(py, &eid).unbind(),
                value.map(|v| PyBytes::new(py, v).unbind()),
            ))
        }

        /// Write the operations `start..stop` (clipped to the end) in order: `put(entry id,
        /// bytes)`, or `delete(entry id)`; the number written.
        fn fill(
            &self,
            put: &Bound<'_, PyAny>,
            delete: &Bound<'_, PyAny>,
            start: usize,
            stop: usize,
        ) -> PyResult<usize> {
            let py = put.py();
            let (start, stop) = (start.min(self.ops.len()), stop.min(self.ops.len()));
            let mut eid = Vec::with_capacity(64);
            for i in start..stop {
                match self.ops.get(i, &mut eid) {
                    Some(value) => put.call1((PyBytes::new(py, &eid), PyBytes::new(py, value)))?,
                    None => delete.call1((PyBytes::new(py, &eid),))?,
                };
            }
            Ok(stop - start)
        }
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<PyPendingWrites>()?;
        m.add_class::<SortedWrites>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(key: &str) -> Vec<u8> {
        let mut p = (key.len() as u32).to_be_bytes().to_vec();
        p.extend_from_slice(key.as_bytes());
        p
    }

    fn ids(pending: &PendingWrites) -> Vec<(Vec<u8>, Option<Vec<u8>>, bool)> {
        pending
            .items()
            .into_iter()
            .map(|(e, v, f)| (e, v.map(<[u8]>::to_vec), f))
            .collect()
    }

    #[test]
    fn fresh_entries_are_dropped_and_others_deleted() {
        let (a, b) = (prefix("a"), prefix("b"));
        let mut p = PendingWrites::default();
        p.put(&a, 5, b"x", true);
        p.put(&a, 3, b"y", false);
        p.put(&a, 5, b"zz", false); // stays fresh
        p.forget(&a, 5); // fresh: gone
        p.forget(&a, 3); // held: a delete
        p.forget(&b, -1); // unknown: a delete
        assert!(p.expire(&a, 9)); // unknown: the local copy may hold it
        p.put(&b, 7, b"w", true);
        assert!(!p.expire(&b, 7)); // fresh: not held
        assert_eq!(p.len(), 2);
        let mut eid = Vec::new();
        entry_id_of(&mut eid, &a, 3);
        let mut other = Vec::new();
        entry_id_of(&mut other, &b, -1);
        assert_eq!(ids(&p), vec![(eid, None, false), (other, None, false)]);
    }

    #[test]
    fn a_write_out_is_in_entry_id_order_and_empties_it() {
        let mut p = PendingWrites::default();
        let keys = ["b", "a", "ab", "\u{e9}", ""];
        for (i, key) in keys.iter().enumerate() {
            for t in [i64::MIN, -1, 0, 1, 300, i64::MAX] {
                p.put(&prefix(key), t, &[i as u8; 3], t > 0);
            }
        }
        let mut want: Vec<Vec<u8>> = p.items().into_iter().map(|(e, _, _)| e).collect();
        want.sort();
        let ops = p.take();
        assert!(p.is_empty());
        let mut eid = Vec::new();
        let got: Vec<Vec<u8>> = (0..ops.len())
            .map(|i| {
                ops.get(i, &mut eid);
                eid.clone()
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn rewrites_keep_the_arena_bounded() {
        let a = prefix("a");
        let mut p = PendingWrites::default();
        for i in 0..200_000u32 {
            // growing values: never written over in place
            p.put(
                &a,
                i64::from(i % 10),
                &vec![1u8; 8 + (i % 40) as usize],
                false,
            );
        }
        assert!(p.arena.used() <= 2 * p.live + CHUNK);
        assert_eq!(p.len(), 10);
    }
}
