//! The window store's restore in one native pass (`stores.restored_entries`): changelog record
//! batches (Kafka's v2 format, uncompressed) replayed into the entries `entry id -> partial
//! bytes` (the record format of `stores.changelog`: upserts carrying their deletions,
//! tombstones, the applied marker, the shape record), then the entries sorted, grouped per key
//! and their `marshal` partials decoded into the Python objects `marshal.loads` gives
//! (`windows`), with a Python fallback for anything outside the subset decoded here.
//! Everything a batch or a partial holds that this code does not know is handed back to the
//! Python path, so the result equals it by construction (tests/test_restored_entries.py).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Changelog key of the applied-offset marker (`stores.changelog.APPLIED_KEY`).
pub const APPLIED_KEY: &[u8] = b"\x00applied";
/// Changelog key of the shape record (`stores.changelog.SHAPE_KEY`).
pub const SHAPE_KEY: &[u8] = b"\x00shape";
const UPSERT_HEADER: usize = 12;
const BATCH_HEADER: usize = 61;

/// Why a record batch or record could not be replayed here.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// Not an uncompressed v2 batch: the caller replays it through its own parser.
    Unsupported,
    /// Bytes that are no valid batch or record of the changelog's format.
    Malformed(&'static str),
}

/// FxHash (rustc's): one multiply per word; the keys are entry-id prefixes and times.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type Fx = BuildHasherDefault<FxHasher>;

/// Where a partial's bytes are in the arena: chunk, start, length.
#[derive(Clone, Copy)]
pub struct Span(u32, u32, u32);

impl Span {
    /// Number of bytes.
    pub(crate) fn len(self) -> usize {
        self.2 as usize
    }
}

pub(crate) const CHUNK: usize = 1 << 20;

/// Storage of partial bytes in 1 MB chunks: one copy each, no allocation per partial. What an
/// overwrite or a removal frees stays until `Entries` compacts the arena.
#[derive(Default)]
pub struct Arena {
    chunks: Vec<Vec<u8>>,
    used: usize,
}

impl Arena {
    pub(crate) fn push(&mut self, data: &[u8]) -> Span {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= data.len());
        if !fits {
            self.chunks.push(Vec::with_capacity(CHUNK.max(data.len())));
        }
        let index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[index];
        let start = chunk.len();
        chunk.extend_from_slice(data);
        self.used += data.len();
        Span(index as u32, start as u32, data.len() as u32)
    }

    /// `data` written over `span` if it fits there (the same partial layout, as a rewritten
    /// entry usually has): the new span; else None.
    pub(crate) fn overwrite(&mut self, span: Span, data: &[u8]) -> Option<Span> {
        if data.len() > span.2 as usize {
            return None;
        }
        let start = span.1 as usize;
        self.chunks[span.0 as usize][start..start + data.len()].copy_from_slice(data);
        Some(Span(span.0, span.1, data.len() as u32))
    }

    /// Bytes written into the chunks, including what overwrites and removals left.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    pub fn get(&self, span: Span) -> &[u8] {
        let start = span.1 as usize;
        &self.chunks[span.0 as usize][start..start + span.2 as usize]
    }
}

/// The entries of a restore, entry id -> partial bytes, kept per key: an entry id of at least
/// 12 bytes is its key's prefix (length and UTF-8) and 8 bytes of time; shorter keys (the shape
/// record) are kept aside. Per record one lookup of the key (few, so in cache) and one hash of
/// the time: no allocation per entry.
#[derive(Default)]
pub struct Entries {
    prefixes: HashMap<Vec<u8>, usize, Fx>,
    keys: Vec<Vec<u8>>,
    windows: Vec<HashMap<i64, Span, Fx>>,
    special: HashMap<Vec<u8>, Vec<u8>>,
    pub arena: Arena,
    /// Bytes of the entries present: the arena is compacted once it holds over twice that.
    live: usize,
}

/// Entries in entry id order: per key prefix, its `(time, span)`s in time order.
pub type Sorted = Vec<(Vec<u8>, Vec<(i64, Span)>)>;

/// `(prefix, time)` of an entry id of at least 12 bytes.
fn split(eid: &[u8]) -> Option<(&[u8], i64)> {
    if eid.len() < 12 {
        return None;
    }
    let (prefix, time) = eid.split_at(eid.len() - 8);
    let biased = u64::from_be_bytes(time.try_into().unwrap());
    Some((prefix, (biased ^ (1u64 << 63)) as i64))
}

pub(crate) fn be_i64(b: &[u8], at: usize) -> Result<i64, ReplayError> {
    b.get(at..at + 8)
        .map(|s| i64::from_be_bytes(s.try_into().unwrap()))
        .ok_or(ReplayError::Malformed("truncated record batch"))
}

pub(crate) fn be_u32(b: &[u8], at: usize) -> Result<u32, ReplayError> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes(s.try_into().unwrap()))
        .ok_or(ReplayError::Malformed("truncated record batch"))
}

/// A zigzag varint (Kafka's varint and varlong) at `*at`, advancing it.
pub(crate) fn varint(b: &[u8], at: &mut usize) -> Result<i64, ReplayError> {
    let mut raw: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = *b
            .get(*at)
            .ok_or(ReplayError::Malformed("truncated varint"))?;
        *at += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
        shift += 7;
        if shift > 63 {
            return Err(ReplayError::Malformed("varint too long"));
        }
    }
}

/// `len` bytes at `*at` (None for a negative length: a null key or value), advancing it.
pub(crate) fn nullable<'a>(
    b: &'a [u8],
    at: &mut usize,
    len: i64,
) -> Result<Option<&'a [u8]>, ReplayError> {
    if len < 0 {
        return Ok(None);
    }
    let end = at
        .checked_add(len as usize)
        .filter(|&e| e <= b.len())
        .ok_or(ReplayError::Malformed("truncated record"))?;
    let s = &b[*at..end];
    *at = end;
    Ok(Some(s))
}

impl Entries {
    fn window_index(&mut self, prefix: &[u8]) -> usize {
        match self.prefixes.get(prefix) {
            Some(&index) => index,
            None => {
                let index = self.keys.len();
                self.prefixes.insert(prefix.to_vec(), index);
                self.keys.push(prefix.to_vec());
                self.windows.push(HashMap::default());
                index
            }
        }
    }

    /// Set entry `key` to `value` (over its old bytes if they fit).
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        let Some((prefix, time)) = split(key) else {
            self.special.insert(key.to_vec(), value.to_vec());
            return;
        };
        let index = self.window_index(prefix);
        let arena = &mut self.arena;
        match self.windows[index].entry(time) {
            Entry::Occupied(mut slot) => {
                let old = *slot.get();
                self.live -= old.2 as usize;
                let span = arena
                    .overwrite(old, value)
                    .unwrap_or_else(|| arena.push(value));
                slot.insert(span);
            }
            Entry::Vacant(slot) => {
                slot.insert(arena.push(value));
            }
        }
        self.live += value.len();
        if self.arena.used > 2 * self.live + CHUNK {
            self.compact();
        }
    }

    /// Copy the present entries' bytes into a fresh arena, dropping what overwrites and
    /// removals left. O(entries), once the arena doubled: amortized O(1) per byte written.
    fn compact(&mut self) {
        let mut fresh = Arena::default();
        for window in &mut self.windows {
            for span in window.values_mut() {
                *span = fresh.push(self.arena.get(*span));
            }
        }
        self.arena = fresh;
    }

    fn forget(&mut self, index: usize, time: i64) -> Option<Span> {
        let span = self.windows[index].remove(&time)?;
        self.live -= span.2 as usize;
        Some(span)
    }

    /// Remove entry `key` and return its bytes, if it was there.
    pub fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        match split(key) {
            Some((prefix, time)) => {
                let index = *self.prefixes.get(prefix)?;
                let span = self.forget(index, time)?;
                Some(self.arena.get(span).to_vec())
            }
            None => self.special.remove(key),
        }
    }

    fn delete(&mut self, prefix: &[u8], time: i64) {
        if let Some(&index) = self.prefixes.get(prefix) {
            self.forget(index, time);
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.special.len() + self.windows.iter().map(HashMap::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replay one changelog record (`stores.changelog.replay_changelog`'s rules); returns
    /// the applied offset after it.
    pub fn apply(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        applied: i64,
    ) -> Result<i64, ReplayError> {
        let Some(key) = key else {
            return match value {
                None => Ok(applied),
                Some(_) => Err(ReplayError::Malformed("a changelog record without a key")),
            };
        };
        let Some(value) = value else {
            self.remove(key);
            return Ok(applied);
        };
        if key == APPLIED_KEY {
            return Ok(applied.max(be_i64(value, 0)?));
        }
        if key == SHAPE_KEY {
            self.put(key, value);
            return Ok(applied);
        }
        let offset = be_i64(value, 0)?;
        let n_deleted = be_u32(value, 8)? as usize;
        let end = UPSERT_HEADER + 8 * n_deleted;
        if value.len() < end || key.len() < 12 {
            return Err(ReplayError::Malformed(
                "an upsert shorter than its header says",
            ));
        }
        let (prefix, _) = split(key).unwrap();
        for i in (UPSERT_HEADER..end).step_by(8) {
            let biased = u64::from_be_bytes(value[i..i + 8].try_into().unwrap());
            self.delete(prefix, (biased ^ (1u64 << 63)) as i64);
        }
        self.put(key, &value[end..]);
        Ok(applied.max(offset))
    }

    /// Replay the records at offsets >= `min_offset` of the record batch `batch` (one whole
    /// v2 batch, CRC already checked by the caller); returns `(applied, records replayed)`.
    /// `Unsupported` (nothing applied) for a compressed batch or another magic.
    pub fn replay_batch(
        &mut self,
        batch: &[u8],
        min_offset: i64,
        mut applied: i64,
    ) -> Result<(i64, u64), ReplayError> {
        if batch.len() < BATCH_HEADER {
            return Err(ReplayError::Malformed("truncated record batch"));
        }
        let magic = batch[16];
        let attributes = u16::from_be_bytes([batch[21], batch[22]]);
        if magic != 2 || attributes & 0x07 != 0 {
            return Err(ReplayError::Unsupported);
        }
        let base_offset = be_i64(batch, 0)?;
        let count = be_u32(batch, 57)?;
        let mut at = BATCH_HEADER;
        let mut replayed = 0;
        for _ in 0..count {
            let length = varint(batch, &mut at)?;
            let end = at
                .checked_add(
                    usize::try_from(length)
                        .map_err(|_| ReplayError::Malformed("bad record length"))?,
                )
                .filter(|&e| e <= batch.len())
                .ok_or(ReplayError::Malformed("truncated record"))?;
            at += 1; // attributes
            varint(batch, &mut at)?; // timestamp delta
            let offset = base_offset + varint(batch, &mut at)?;
            let key_len = varint(batch, &mut at)?;
            let key = nullable(batch, &mut at, key_len)?;
            let value_len = varint(batch, &mut at)?;
            let value = nullable(batch, &mut at, value_len)?;
            if at > end {
                return Err(ReplayError::Malformed("record longer than its length"));
            }
            at = end; // the headers, which the changelog does not use
            if offset >= min_offset {
                applied = self.apply(key, value, applied)?;
                replayed += 1;
            }
        }
        Ok((applied, replayed))
    }

    /// The entries in entry id order, per key: `(prefix, [(time, span), ...])`, keys in
    /// prefix order (the prefixes are prefix-free, so that is entry id order), times
    /// ascending; the maps emptied, shorter keys left aside.
    pub fn into_sorted(&mut self) -> Sorted {
        let mut out: Sorted = Vec::with_capacity(self.keys.len());
        for (prefix, window) in self.keys.drain(..).zip(self.windows.drain(..)) {
            if window.is_empty() {
                continue;
            }
            let mut pairs: Vec<(i64, Span)> = window.into_iter().collect();
            pairs.sort_unstable_by_key(|&(t, _)| t);
            out.push((prefix, pairs));
        }
        self.prefixes.clear();
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(feature = "python")]
pub mod python {
    //! `stores._native.RestoredEntries`: `Entries` as a Python class.
    use super::{Entries, ReplayError, Sorted};
    use pyo3::exceptions::{PyRuntimeError, PyValueError};
    use pyo3::prelude::*;
    use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

    fn replay_error(e: ReplayError) -> PyErr {
        match e {
            ReplayError::Unsupported => PyValueError::new_err("unsupported record batch"),
            ReplayError::Malformed(what) => {
                PyValueError::new_err(format!("corrupt changelog record: {what}"))
            }
        }
    }

    /// Entry id -> partial bytes of one restore (see `stores.restored_entries`).
    #[pyclass(module = "stores._native")]
    pub struct RestoredEntries {
        entries: Entries,
        sorted: Option<(Sorted, usize)>,
    }

    impl RestoredEntries {
        fn open(&mut self) -> PyResult<&mut Entries> {
            if self.sorted.is_some() {
                return Err(PyRuntimeError::new_err(
                    "the entries were already turned into windows",
                ));
            }
            Ok(&mut self.entries)
        }
    }

    #[pymethods]
    impl RestoredEntries {
        #[new]
        fn new() -> Self {
            RestoredEntries {
                entries: Entries::default(),
                sorted: None,
            }
        }

        fn __len__(&self) -> usize {
            self.sorted
                .as_ref()
                .map_or_else(|| self.entries.len(), |s| s.1)
        }

        fn put(&mut self, key: &[u8], value: &[u8]) -> PyResult<()> {
            self.open()?.put(key, value);
            Ok(())
        }

        fn delete(&mut self, key: &[u8]) -> PyResult<()> {
            self.open()?.remove(key);
            Ok(())
        }

        fn pop<'py>(
            &mut self,
            py: Python<'py>,
            key: &[u8],
        ) -> PyResult<Option<Bound<'py, PyBytes>>> {
            Ok(self.open()?.remove(key).map(|v| PyBytes::new(py, &v)))
        }

        /// Put every `(key, value)` of an iterable of byte pairs (a local copy's items).
        fn extend(&mut self, items: &Bound<'_, PyAny>) -> PyResult<()> {
            let entries = self.open()?;
            for item in items.try_iter()? {
                let (k, v): (Bound<'_, PyBytes>, Bound<'_, PyBytes>) = item?.extract()?;
                entries.put(k.as_bytes(), v.as_bytes());
            }
            Ok(())
        }

        /// Replay the record batch `data[pos:pos + size]` (records at offsets >= `min_offset`):
        /// `(applied, records replayed)`, or None (nothing applied) when it is compressed or of
        /// another magic.
        fn replay_batch(
            &mut self,
            data: &[u8],
            pos: usize,
            size: usize,
            min_offset: i64,
            applied: i64,
        ) -> PyResult<Option<(i64, u64)>> {
            let batch = pos
                .checked_add(size)
                .and_then(|end| data.get(pos..end))
                .ok_or_else(|| PyValueError::new_err("record batch outside the fetched bytes"))?;
            // Unsupported is found before any record is applied; a corrupt batch fails the
            // whole restore
            match self.open()?.replay_batch(batch, min_offset, applied) {
                Ok(done) => Ok(Some(done)),
                Err(ReplayError::Unsupported) => Ok(None),
                Err(e) => Err(replay_error(e)),
            }
        }

        /// The entries as windows: `{key: [(time, partial), ...]}`, keys in entry id order,
        /// each list in time order, partials decoded from `marshal` bytes here when `marshal`
        /// and the bytes are of the subset known here, else by `decode(bytes)`. Entries whose
        /// id is shorter than 12 bytes must have been popped. The entries stay, sorted, for
        /// `sorted_items`.
        fn windows<'py>(
            &mut self,
            py: Python<'py>,
            decode: &Bound<'py, PyAny>,
            marshal: bool,
        ) -> PyResult<Bound<'py, PyDict>> {
            let entries = self.open()?;
            if entries.len() != entries.windows.iter().map(|w| w.len()).sum::<usize>() {
                return Err(PyValueError::new_err("an entry id shorter than 12 bytes"));
            }
            let sorted = entries.into_sorted();
            let arena = &entries.arena;
            let out = PyDict::new(py);
            let mut count = 0;
            for (prefix, pairs) in &sorted {
                let mut list = Vec::with_capacity(pairs.len());
                for &(time, span) in pairs {
                    let data = arena.get(span);
                    let partial = match marshal.then(|| super::marshal::loads(py, data)).flatten() {
                        Some(obj) => obj?,
                        None => decode.call1((PyBytes::new(py, data),))?,
                    };
                    list.push(PyTuple::new(
                        py,
                        [time.into_pyobject(py)?.into_any(), partial],
                    )?);
                }
                count += pairs.len();
                let name = std::str::from_utf8(&prefix[4..])
                    .map_err(|e| PyValueError::new_err(format!("a key is not UTF-8: {e}")))?;
                out.set_item(PyString::new(py, name), PyList::new(py, list)?)?;
            }
            self.sorted = Some((sorted, count));
            Ok(out)
        }

        /// `[(entry id, partial bytes), ...]` of the entries `start` to `stop` in entry id
        /// order, after `windows` (the local copy's backfill).
        fn sorted_items<'py>(
            &self,
            py: Python<'py>,
            start: usize,
            stop: usize,
        ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
            let (sorted, _) = self
                .sorted
                .as_ref()
                .ok_or_else(|| PyRuntimeError::new_err("windows() was not called"))?;
            let mut out = Vec::with_capacity(stop.saturating_sub(start));
            let mut index = 0;
            for (prefix, pairs) in sorted {
                if index >= stop {
                    break;
                }
                if index + pairs.len() <= start {
                    index += pairs.len();
                    continue;
                }
                let mut eid = prefix.clone();
                for &(time, span) in pairs {
                    if index >= start && index < stop {
                        eid.truncate(prefix.len());
                        eid.extend_from_slice(&((time as u64) ^ (1u64 << 63)).to_be_bytes());
                        out.push((
                            PyBytes::new(py, &eid),
                            PyBytes::new(py, self.entries.arena.get(span)),
                        ));
                    }
                    index += 1;
                }
            }
            Ok(out)
        }
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<RestoredEntries>()
    }
}

#[cfg(feature = "python")]
mod marshal {
    //! The subset of `marshal` format 4 that built-in partials use (None, bools, ints, floats,
    //! strings, tuples, references): `loads` gives the objects `marshal.loads` gives, or None
    //! for anything else (the caller falls back to Python).
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyFloat, PyString, PyTuple};

    const FLAG_REF: u8 = 0x80;

    struct Reader<'a, 'py> {
        py: Python<'py>,
        b: &'a [u8],
        at: usize,
        refs: Vec<Option<Bound<'py, PyAny>>>,
    }

    impl<'a, 'py> Reader<'a, 'py> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            let s = self.b.get(self.at..self.at.checked_add(n)?)?;
            self.at += n;
            Some(s)
        }

        fn u8(&mut self) -> Option<u8> {
            self.take(1).map(|s| s[0])
        }

        fn i32(&mut self) -> Option<i32> {
            self.take(4)
                .map(|s| i32::from_le_bytes(s.try_into().unwrap()))
        }

        fn object(&mut self) -> Option<PyResult<Bound<'py, PyAny>>> {
            let code = self.u8()?;
            let flag = code & FLAG_REF != 0;
            let py = self.py;
            let obj: Bound<'py, PyAny> = match code & !FLAG_REF {
                b'N' => py.None().into_bound(py),
                b'T' => PyBool::new(py, true).to_owned().into_any(),
                b'F' => PyBool::new(py, false).to_owned().into_any(),
                b'i' => match self.i32()?.into_pyobject(py) {
                    Ok(v) => v.into_any(),
                    Err(e) => return Some(Err(e.into())),
                },
                b'l' => {
                    let n = self.i32()?;
                    let digits = n.unsigned_abs() as usize;
                    if digits == 0 || digits > 4 {
                        return None; // beyond 60 bits: Python's marshal
                    }
                    let mut v: i64 = 0;
                    for d in 0..digits {
                        let s = self.take(2)?;
                        let digit = i64::from(u16::from_le_bytes([s[0], s[1]]));
                        if digit >= 1 << 15 {
                            return None;
                        }
                        v |= digit << (15 * d);
                    }
                    match (if n < 0 { -v } else { v }).into_pyobject(py) {
                        Ok(v) => v.into_any(),
                        Err(e) => return Some(Err(e.into())),
                    }
                }
                b'g' => {
                    let s = self.take(8)?;
                    PyFloat::new(py, f64::from_le_bytes(s.try_into().unwrap())).into_any()
                }
                b'u' | b't' | b'a' | b'A' => {
                    let n = usize::try_from(self.i32()?).ok()?;
                    PyString::new(py, std::str::from_utf8(self.take(n)?).ok()?).into_any()
                }
                b'z' | b'Z' => {
                    let n = usize::from(self.u8()?);
                    PyString::new(py, std::str::from_utf8(self.take(n)?).ok()?).into_any()
                }
                b'r' => {
                    let index = usize::try_from(self.i32()?).ok()?;
                    return self.refs.get(index)?.clone().map(Ok);
                }
                code @ (b')' | b'(') => {
                    let n = if code == b')' {
                        usize::from(self.u8()?)
                    } else {
                        usize::try_from(self.i32()?).ok()?
                    };
                    let slot = flag.then(|| {
                        self.refs.push(None);
                        self.refs.len() - 1
                    });
                    let mut items = Vec::with_capacity(n.min(64));
                    for _ in 0..n {
                        match self.object()? {
                            Ok(item) => items.push(item),
                            Err(e) => return Some(Err(e)),
                        }
                    }
                    let tuple = match PyTuple::new(py, items) {
                        Ok(t) => t.into_any(),
                        Err(e) => return Some(Err(e)),
                    };
                    if let Some(slot) = slot {
                        self.refs[slot] = Some(tuple.clone());
                    }
                    return Some(Ok(tuple));
                }
                _ => return None,
            };
            if flag {
                self.refs.push(Some(obj.clone()));
            }
            Some(Ok(obj))
        }
    }

    /// `marshal.loads(data)` when `data` is one object of the subset above and nothing after
    /// it; None otherwise.
    pub fn loads<'py>(py: Python<'py>, data: &[u8]) -> Option<PyResult<Bound<'py, PyAny>>> {
        let mut reader = Reader {
            py,
            b: data,
            at: 0,
            refs: Vec::new(),
        };
        let obj = reader.object()?;
        (reader.at == data.len()).then_some(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(offset: i64, deleted: &[u64], partial: &[u8]) -> Vec<u8> {
        let mut v = offset.to_be_bytes().to_vec();
        v.extend((deleted.len() as u32).to_be_bytes());
        for t in deleted {
            v.extend(t.to_be_bytes());
        }
        v.extend(partial);
        v
    }

    fn eid(key: &str, time: i64) -> Vec<u8> {
        let mut v = (key.len() as u32).to_be_bytes().to_vec();
        v.extend(key.as_bytes());
        v.extend(((time as u64) ^ (1 << 63)).to_be_bytes());
        v
    }

    #[test]
    fn rewrites_and_removals_leave_the_arena_bounded() {
        let mut e = Entries::default();
        for i in 0..200_000i64 {
            let value = upsert(i, &[], &(i as f64).to_le_bytes()[..(1 + i % 8) as usize]);
            e.apply(Some(&eid("k", i % 10)), Some(&value), -1).unwrap();
            e.apply(Some(&eid("gone", i)), Some(&value), -1).unwrap();
            e.apply(Some(&eid("gone", i)), None, -1).unwrap();
        }
        assert_eq!(e.len(), 10);
        assert!(e.arena.used <= 2 * 80 + CHUNK, "{} bytes", e.arena.used);
        let last = (199_990..200_000i64)
            .map(|i| (i % 10, i))
            .collect::<Vec<_>>();
        for (t, i) in last {
            let want = &(i as f64).to_le_bytes()[..(1 + i % 8) as usize];
            assert_eq!(e.remove(&eid("k", t)).unwrap(), want);
        }
    }

    #[test]
    fn upserts_delete_what_they_carry_and_tombstones_remove() {
        let mut e = Entries::default();
        let a = e
            .apply(Some(&eid("k", 1)), Some(&upsert(5, &[], b"x")), -1)
            .unwrap();
        let a = e
            .apply(
                Some(&eid("k", 2)),
                Some(&upsert(6, &[1 ^ (1 << 63)], b"y")),
                a,
            )
            .unwrap();
        assert_eq!(a, 6);
        assert_eq!(e.len(), 1);
        assert_eq!(e.remove(&eid("k", 2)).unwrap(), b"y");
        e.put(&eid("k", 2), b"y");
        let a = e
            .apply(Some(APPLIED_KEY), Some(&9i64.to_be_bytes()), a)
            .unwrap();
        assert_eq!(a, 9);
        e.apply(Some(&eid("k", 2)), None, a).unwrap();
        assert!(e.is_empty());
        assert_eq!(split(&eid("k", -3)), Some((&eid("k", 0)[..5], -3)));
    }
}
