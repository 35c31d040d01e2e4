//! The window store's writes in one native call per slice (`stores.window_store.WindowStore.
//! record_many` and `evict`): entry ids, the partials' `marshal` bytes, upsert values and
//! tombstones, byte for byte what the Python path (`stores.changelog`, `MarshalStateCodec`)
//! writes. The Python path's `marshal.dumps(partial, 4)` sets a reference flag on every object
//! it sees with more than one reference (the partial itself always: the caller holds it) and
//! writes a repeated one as a reference; `marshal_fields` emulates that for the partials the
//! windows kernel makes (`python::partial_to_py`: fresh tuples and floats, the cached small
//! ints and the empty tuple shared), and `python::dumps` reads the real reference counts of a
//! Python partial, handing anything outside None, bools, ints, floats and tuples back to the
//! Python codec, so both are byte-identical by construction (tests/test_store_writes.py).

use crate::monoids::{Kind, Spec, Val};

/// Bias of a time in an entry id (`stores.changelog._TIME_BIAS`): offset binary.
const TIME_BIAS: u64 = 1 << 63;
/// marshal's flag on an object that later references may point at.
const FLAG_REF: u8 = 0x80;

/// `key_prefix(key) + time`: the entry id of `(key, time)` (`stores.changelog.entry_id`).
pub fn entry_id(out: &mut Vec<u8>, key: &[u8], time: i64) {
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&((time as u64) ^ TIME_BIAS).to_be_bytes());
}

/// `encode_upsert(offset, deleted, partial)`: the header (`>qI`), the deleted times, the
/// partial's bytes.
pub fn upsert(out: &mut Vec<u8>, offset: i64, deleted: &[i64], partial: &[u8]) {
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&(deleted.len() as u32).to_be_bytes());
    for &t in deleted {
        out.extend_from_slice(&((t as u64) ^ TIME_BIAS).to_be_bytes());
    }
    out.extend_from_slice(partial);
}

/// An int as marshal writes it, flag included: `i` within 32 bits, else `l` with base 2^15
/// digits, least significant first, their count signed.
fn write_int(out: &mut Vec<u8>, v: i64, flag: u8) {
    if (i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(&v) {
        out.push(b'i' | flag);
        out.extend_from_slice(&(v as i32).to_le_bytes());
        return;
    }
    let mut magnitude = v.unsigned_abs();
    let mut digits: Vec<u16> = Vec::with_capacity(5);
    while magnitude != 0 {
        digits.push((magnitude & 0x7fff) as u16);
        magnitude >>= 15;
    }
    let n = digits.len() as i32;
    out.push(b'l' | flag);
    out.extend_from_slice(&(if v < 0 { -n } else { n }).to_le_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_le_bytes());
    }
}

/// A small tuple's header (fewer than 256 items, as every partial here).
fn write_tuple_header(out: &mut Vec<u8>, n: usize, flag: u8) {
    out.push(b')' | flag);
    out.push(n as u8);
}

/// The shared objects a kernel partial's Python twin can hold: the empty tuple and the
/// small ints CPython caches (-5 to 256); each gets a reference index when first written.
#[derive(PartialEq, Clone, Copy)]
enum Shared {
    Empty,
    SmallInt(i64),
}

struct Refs {
    /// Index 0 is the partial's own tuple.
    seen: Vec<Shared>,
}

impl Refs {
    /// Write `shared` as a reference if it was written before (true); else note it.
    fn reference(&mut self, out: &mut Vec<u8>, shared: Shared) -> bool {
        if let Some(i) = self.seen.iter().position(|&s| s == shared) {
            out.push(b'r');
            out.extend_from_slice(&(i as u32 + 1).to_le_bytes());
            return true;
        }
        self.seen.push(shared);
        false
    }
}

/// `v` as marshal writes `python::val_to_py(v)` inside a partial.
fn write_val(out: &mut Vec<u8>, refs: &mut Refs, v: Val) -> Result<(), &'static str> {
    match v {
        Val::None => out.push(b'N'),
        Val::Empty => {
            if !refs.reference(out, Shared::Empty) {
                write_tuple_header(out, 0, FLAG_REF);
            }
        }
        Val::Int(i) if (-5..=256).contains(&i) => {
            if !refs.reference(out, Shared::SmallInt(i)) {
                write_int(out, i, FLAG_REF);
            }
        }
        Val::Int(i) => write_int(out, i, 0),
        Val::Float(f) => {
            out.push(b'g');
            out.extend_from_slice(&f.to_le_bytes());
        }
        Val::Overflow => return Err("an int sum beyond int64"),
    }
    Ok(())
}

/// `marshal.dumps(partial, 4)` of the compose partial `partial_to_py(spec, true, fields)`
/// as the store encodes it (the partial held elsewhere too, so flagged), appended to `out`.
pub fn marshal_fields(spec: &Spec, fields: &[Val], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let items: usize = spec
        .parts
        .iter()
        .map(|&(kind, _)| match kind {
            Kind::Mean | Kind::Geomean | Kind::SampleStddev | Kind::PopStddev => 3,
            _ => 1,
        })
        .sum();
    let mut refs = Refs { seen: Vec::new() };
    write_tuple_header(out, items, FLAG_REF);
    for &(kind, o) in &spec.parts {
        match kind {
            Kind::Count | Kind::Sum | Kind::Min | Kind::Max => {
                write_val(out, &mut refs, fields[o])?
            }
            Kind::First | Kind::Last => match fields[o] {
                Val::Empty => write_val(out, &mut refs, Val::Empty)?,
                v => {
                    write_tuple_header(out, 1, 0);
                    write_val(out, &mut refs, v)?;
                }
            },
            Kind::Maxcount | Kind::Mincount => {
                write_tuple_header(out, 2, 0);
                write_val(out, &mut refs, fields[o])?;
                write_val(out, &mut refs, fields[o + 1])?;
            }
            Kind::Mean | Kind::Geomean | Kind::SampleStddev | Kind::PopStddev => {
                for j in 0..3 {
                    write_val(out, &mut refs, fields[o + j])?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(feature = "python")]
pub mod python {
    //! `stores._native.write_effects` / `write_evictions`: the store's writes of a slice of
    //! effects into its coalesced local writes (`pending`, entry id -> partial bytes or None,
    //! and `fresh`, see `stores.window_store._OpenPartition`) and its changelog queue (a list
    //! of `(entry id, value or None)`), one call per slice.
    use super::{entry_id, upsert, write_int, write_tuple_header, FLAG_REF};
    use crate::record_batch::python::PyChangelogRecords;
    use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
    use pyo3::ffi;
    use pyo3::prelude::*;
    use pyo3::types::{
        PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PySet, PySlice, PyString, PyTuple,
    };
    use std::sync::Arc;

    /// Deeper tuples go to the Python codec (marshal's own limit is 2000).
    const MAX_DEPTH: usize = 64;

    /// `marshal.dumps` of a Python partial, following CPython's writer (`w_ref`): an object
    /// with one reference is written plainly, any other is flagged when first seen and
    /// written as a reference after; `top` (the partial) counts as shared. None for objects
    /// outside None, bools, ints, floats and tuples (exact types), which the caller hands to
    /// the Python codec.
    struct Dumper {
        out: Vec<u8>,
        refs: Vec<*mut ffi::PyObject>,
    }

    impl Dumper {
        fn object(&mut self, obj: &Bound<'_, PyAny>, top: bool, depth: usize) -> Option<()> {
            if depth > MAX_DEPTH {
                return None;
            }
            if obj.is_none() {
                self.out.push(b'N');
                return Some(());
            }
            if let Ok(b) = obj.downcast_exact::<PyBool>() {
                self.out.push(if b.is_true() { b'T' } else { b'F' });
                return Some(());
            }
            let ptr = obj.as_ptr();
            // SAFETY: `obj` is a live object; its count is read, not changed
            let shared = top || unsafe { ffi::Py_REFCNT(ptr) } != 1;
            let mut flag = 0;
            if shared {
                if let Some(i) = self.refs.iter().position(|&p| p == ptr) {
                    self.out.push(b'r');
                    self.out.extend_from_slice(&(i as u32).to_le_bytes());
                    return Some(());
                }
                self.refs.push(ptr);
                flag = FLAG_REF;
            }
            if obj.is_exact_instance_of::<PyInt>() {
                write_int(&mut self.out, obj.extract::<i64>().ok()?, flag);
            } else if let Ok(f) = obj.downcast_exact::<PyFloat>() {
                self.out.push(b'g' | flag);
                self.out.extend_from_slice(&f.value().to_le_bytes());
            } else if let Ok(t) = obj.downcast_exact::<PyTuple>() {
                let n = t.len();
                if n < 256 {
                    write_tuple_header(&mut self.out, n, flag);
                } else {
                    self.out.push(b'(' | flag);
                    self.out.extend_from_slice(&(n as u32).to_le_bytes());
                }
                for i in 0..n {
                    // borrowed: the item's count stays what marshal would see
                    let item = t.get_borrowed_item(i).ok()?;
                    self.object(&item, false, depth + 1)?;
                }
            } else {
                return None;
            }
            Some(())
        }
    }

    /// The partial's bytes: natively when it is of the subset above, else `encode(partial)`.
    fn partial_bytes<'py>(
        partial: &Bound<'py, PyAny>,
        encode: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut dumper = Dumper {
            out: Vec::with_capacity(64),
            refs: Vec::new(),
        };
        match dumper.object(partial, true, 0) {
            Some(()) => Ok(PyBytes::new(partial.py(), &dumper.out)),
            None => Ok(encode.call1((partial,))?.downcast_into::<PyBytes>()?),
        }
    }

    /// `marshal.dumps(partial, 4)` as the store writes it, or None when the Python codec
    /// must (tests compare the two).
    #[pyfunction]
    fn dumps_partial<'py>(partial: &Bound<'py, PyAny>) -> Option<Bound<'py, PyBytes>> {
        let mut dumper = Dumper {
            out: Vec::new(),
            refs: Vec::new(),
        };
        dumper
            .object(partial, true, 0)
            .map(|()| PyBytes::new(partial.py(), &dumper.out))
    }

    fn utf8<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
        let key = key
            .downcast::<PyString>()
            .map_err(|_| PyTypeError::new_err("an effect's key must be a str"))?;
        // the UTF-8 form Python's str.encode() gives (an error for lone surrogates)
        Ok(key.to_str()?.as_bytes())
    }

    /// The changelog queue: the native `ChangelogRecords` (records written into it, no
    /// Python object each) or a list of `(entry id, value or None)` tuples.
    enum Queue<'a, 'py> {
        Native(PyRefMut<'py, PyChangelogRecords>),
        List(&'a Bound<'py, PyList>),
    }

    impl<'a, 'py> Queue<'a, 'py> {
        fn of(queued: &'a Bound<'py, PyAny>) -> PyResult<Self> {
            match queued.downcast::<PyChangelogRecords>() {
                Ok(native) => Ok(Queue::Native(native.borrow_mut())),
                Err(_) => Ok(Queue::List(queued.downcast::<PyList>()?)),
            }
        }

        /// Queue `(eid, value)`; `eid` is `eid_bytes`'s content.
        fn push(
            &mut self,
            eid: &[u8],
            eid_bytes: &Bound<'py, PyBytes>,
            value: Option<&[u8]>,
        ) -> PyResult<()> {
            match self {
                Queue::Native(queue) => {
                    queue.push(eid, value);
                    Ok(())
                }
                Queue::List(list) => {
                    let py = list.py();
                    list.append((eid_bytes, value.map(|v| PyBytes::new(py, v))))
                }
            }
        }
    }

    /// The store effects of a batch in one buffer, as the kernel made them: per effect its
    /// input offset, its key (an index into `keys`), its window time and its partial's bytes
    /// (the codec's, `marshal_fields`) in `partials` up to `ends[i]`; with evictions (an
    /// event applied as `apply_one`), the times it evicted in `evicted` up to
    /// `evicted_ends[i]` (`evicted_ends` empty: none evicted, effects of 4 items).
    #[derive(Default)]
    pub struct EffectsData {
        pub offsets: Vec<i64>,
        pub keys: Vec<Py<PyString>>,
        pub key_of: Vec<u32>,
        pub times: Vec<i64>,
        pub partials: Vec<u8>,
        pub ends: Vec<usize>,
        pub evicted: Vec<i64>,
        pub evicted_ends: Vec<usize>,
    }

    impl EffectsData {
        fn partial(&self, i: usize) -> &[u8] {
            let begin = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.partials[begin..self.ends[i]]
        }

        /// The times effect `i` evicted (none without evictions).
        fn evicted(&self, i: usize) -> &[i64] {
            if self.evicted_ends.is_empty() {
                return &[];
            }
            let begin = if i == 0 { 0 } else { self.evicted_ends[i - 1] };
            &self.evicted[begin..self.evicted_ends[i]]
        }
    }

    /// `(offset, key, time, partial bytes)` effects of one batch, or `(..., evicted times)`
    /// ones of events applied one by one, without a Python object each
    /// (`KeyWindows.apply_fetched`, `apply_fetched_events`): a sequence of them (an item is made as a tuple
    /// when asked; a slice is a view), which `write_effects` reads natively.
    #[pyclass(module = "stores._native", name = "Effects", frozen, sequence)]
    pub struct PyEffects {
        data: Arc<EffectsData>,
        start: usize,
        end: usize,
    }

    impl PyEffects {
        pub fn new(data: EffectsData) -> Self {
            let end = data.offsets.len();
            PyEffects {
                data: Arc::new(data),
                start: 0,
                end,
            }
        }

        fn item<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyTuple>> {
            let d = &self.data;
            let (offset, key, time, partial) = (
                d.offsets[i],
                d.keys[d.key_of[i] as usize].clone_ref(py),
                d.times[i],
                PyBytes::new(py, d.partial(i)),
            );
            if d.evicted_ends.is_empty() {
                return (offset, key, time, partial).into_pyobject(py);
            }
            let evicted = PyTuple::new(py, d.evicted(i))?;
            (offset, key, time, partial, evicted).into_pyobject(py)
        }
    }

    #[pymethods]
    impl PyEffects {
        fn __len__(&self) -> usize {
            self.end - self.start
        }

        /// An effect as a tuple, or a slice (step 1) as a view.
        fn __getitem__(&self, py: Python<'_>, index: &Bound<'_, PyAny>) -> PyResult<PyObject> {
            let n = self.__len__();
            if let Ok(slice) = index.downcast::<PySlice>() {
                let indices = slice.indices(n as isize)?;
                if indices.step != 1 {
                    return Err(PyValueError::new_err("a slice of effects has step 1"));
                }
                let (start, stop) = (
                    indices.start as usize,
                    indices.stop.max(indices.start) as usize,
                );
                let view = PyEffects {
                    data: self.data.clone(),
                    start: self.start + start,
                    end: self.start + stop,
                };
                return Ok(Py::new(py, view)?.into_any());
            }
            let i: isize = index.extract()?;
            let i = if i < 0 { i + n as isize } else { i };
            match usize::try_from(i) {
                Ok(i) if i < n => Ok(self.item(py, self.start + i)?.into_any().unbind()),
                _ => Err(PyIndexError::new_err("effect index out of range")),
            }
        }

        fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            let list = PyList::empty(py);
            for i in self.start..self.end {
                list.append(self.item(py, i)?)?;
            }
            list.try_iter().map(Bound::into_any)
        }
    }

    /// `write_effects`' state: the store's pending writes and changelog queue, the applied
    /// offset and the horizon, and reused buffers.
    struct Writer<'a, 'py> {
        py: Python<'py>,
        partition: i64,
        applied: i64,
        horizon: Option<i64>,
        pending: &'a Bound<'py, PyDict>,
        fresh: &'a Bound<'py, PySet>,
        queue: Queue<'a, 'py>,
        eid: Vec<u8>,
        value: Vec<u8>,
    }

    impl Writer<'_, '_> {
        /// One effect (see `write_effects`).
        fn write(
            &mut self,
            offset: i64,
            key: &[u8],
            time: i64,
            data: &Bound<'_, PyBytes>,
            evicted: &[i64],
        ) -> PyResult<()> {
            if offset <= self.applied {
                return Err(PyValueError::new_err(format!(
                    "offset {offset} of partition {} is not after the applied offset {}: a \
                     redelivered record must be skipped",
                    self.partition, self.applied
                )));
            }
            let py = self.py;
            self.eid.clear();
            entry_id(&mut self.eid, key, time);
            let eid_bytes = PyBytes::new(py, &self.eid);
            self.value.clear();
            upsert(&mut self.value, offset, evicted, data.as_bytes());
            if self.horizon.is_none_or(|h| time > h) {
                self.horizon = Some(time);
                self.fresh.add(&eid_bytes)?;
            }
            self.pending.set_item(&eid_bytes, data)?;
            self.queue.push(&self.eid, &eid_bytes, Some(&self.value))?;
            for &t in evicted {
                self.eid.clear();
                entry_id(&mut self.eid, key, t);
                let gone = PyBytes::new(py, &self.eid);
                forget(self.pending, self.fresh, &gone)?;
                self.queue.push(&self.eid, &gone, None)?;
            }
            self.applied = offset;
            Ok(())
        }
    }

    /// Note the deletion of entry `eid` in `pending` (`stores.window_store._forget`): dropped
    /// if it is in `fresh` (not in the local copy), else set to None.
    fn forget(
        pending: &Bound<'_, PyDict>,
        fresh: &Bound<'_, PySet>,
        eid: &Bound<'_, PyBytes>,
    ) -> PyResult<()> {
        if fresh.discard(eid)? {
            pending.del_item(eid)
        } else {
            pending.set_item(eid, eid.py().None())
        }
    }

    /// Write effects `effects` (a list of `(offset, key, time, partial)` or
    /// `(offset, key, time, partial, evicted_times)`, or an `Effects` buffer of encoded
    /// ones, read without a Python object each), in order, as `WindowStore.record_many`
    /// does: per effect `pending[entry id] = partial bytes` (the id added to `fresh` when its
    /// time is after `horizon`, which then moves to it), `forget` per evicted time, and onto
    /// `queued` (a `ChangelogRecords`, written into with no Python object, or a list) the
    /// upsert `(entry id, header + evicted times + partial bytes)` and a
    /// tombstone `(entry id, None)` per evicted time. The partial bytes are the partial
    /// itself when `encoded` (bytes the codec wrote), else its marshal bytes (`encode(partial)`
    /// for what is not native). Returns `(applied offset, horizon)`; a ValueError, as the
    /// Python path's, for an offset not after the applied one (the effects before it
    /// written, as there). O(effects + evicted times).
    #[pyfunction]
    #[pyo3(signature = (effects, applied, partition, encoded, encode, pending, fresh, horizon, queued))]
    #[allow(clippy::too_many_arguments)]
    fn write_effects<'py>(
        py: Python<'py>,
        effects: &Bound<'py, PyAny>,
        applied: i64,
        partition: i64,
        encoded: bool,
        encode: &Bound<'py, PyAny>,
        pending: &Bound<'py, PyDict>,
        fresh: &Bound<'py, PySet>,
        horizon: Option<i64>,
        queued: &Bound<'py, PyAny>,
    ) -> PyResult<(i64, Option<i64>)> {
        let mut writer = Writer {
            py,
            partition,
            applied,
            horizon,
            pending,
            fresh,
            queue: Queue::of(queued)?,
            eid: Vec::with_capacity(64),
            value: Vec::with_capacity(128),
        };
        let outcome = write_all(&mut writer, effects, encoded, encode);
        // the effects written before an error stay written, as on the Python path
        outcome.map(|()| (writer.applied, writer.horizon))
    }

    fn write_all<'py>(
        writer: &mut Writer<'_, 'py>,
        effects: &Bound<'py, PyAny>,
        encoded: bool,
        encode: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let py = writer.py;
        if let Ok(buffer) = effects.downcast::<PyEffects>() {
            let buffer = buffer.get();
            let d = &buffer.data;
            for i in buffer.start..buffer.end {
                let key = d.keys[d.key_of[i] as usize].bind(py).to_str()?;
                let data = PyBytes::new(py, d.partial(i));
                writer.write(
                    d.offsets[i],
                    key.as_bytes(),
                    d.times[i],
                    &data,
                    d.evicted(i),
                )?;
            }
            return Ok(());
        }
        let mut evicted: Vec<i64> = Vec::new();
        for effect in effects.downcast::<PyList>()?.iter() {
            let effect = effect.downcast::<PyTuple>()?;
            let n = effect.len();
            if n != 4 && n != 5 {
                return Err(PyValueError::new_err(format!(
                    "an effect is (offset, key, time, partial[, evicted_times]), not {n} items"
                )));
            }
            let offset: i64 = effect.get_borrowed_item(0)?.extract()?;
            let key = effect.get_borrowed_item(1)?;
            let key = utf8(&key)?;
            let time: i64 = effect.get_borrowed_item(2)?.extract()?;
            let partial = effect.get_borrowed_item(3)?;
            let data = if encoded {
                partial.downcast::<PyBytes>()?.clone()
            } else {
                partial_bytes(&partial, encode)?
            };
            evicted.clear();
            if n == 5 {
                for t in effect.get_borrowed_item(4)?.try_iter()? {
                    evicted.push(t?.extract()?);
                }
            }
            writer.write(offset, key, time, &data, &evicted)?;
        }
        Ok(())
    }

    /// `WindowStore.evict`'s writes of `key`'s entries at `times`: `forget` each in
    /// `pending` and a tombstone `(entry id, None)` each onto `queued`; returns their number.
    #[pyfunction]
    fn write_evictions<'py>(
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        times: &Bound<'py, PyAny>,
        pending: &Bound<'py, PyDict>,
        fresh: &Bound<'py, PySet>,
        queued: &Bound<'py, PyAny>,
    ) -> PyResult<usize> {
        let key = utf8(key)?;
        let mut queue = Queue::of(queued)?;
        let mut eid: Vec<u8> = Vec::with_capacity(64);
        let mut count = 0;
        for t in times.try_iter()? {
            eid.clear();
            entry_id(&mut eid, key, t?.extract()?);
            let gone = PyBytes::new(py, &eid);
            forget(pending, fresh, &gone)?;
            queue.push(&eid, &gone, None)?;
            count += 1;
        }
        Ok(count)
    }

    /// Bytes of an entry id compared inline when sorting a write-out (a key prefix of 4 bytes,
    /// the key, the time's 8: ids of keys up to 20 bytes long are compared whole).
    const SORT_PREFIX: usize = 32;

    /// `WindowStore.expire`'s writes of `key`'s expired entries at `times` (all of its
    /// entries up to the latest of them): each fresh one dropped from `pending` and `fresh`,
    /// each other one from `pending`, and if there was any other one, `cleared[key prefix]`
    /// raised to just past the latest expired id (the copy's range deletion); a tombstone
    /// `(entry id, None)` each onto `queued`. Returns their number.
    #[pyfunction]
    fn write_expirations<'py>(
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        times: &Bound<'py, PyAny>,
        pending: &Bound<'py, PyDict>,
        fresh: &Bound<'py, PySet>,
        cleared: &Bound<'py, PyDict>,
        queued: &Bound<'py, PyAny>,
    ) -> PyResult<usize> {
        let key = utf8(key)?;
        let mut queue = Queue::of(queued)?;
        let mut eid: Vec<u8> = Vec::with_capacity(64);
        let mut end: Option<Vec<u8>> = None; // just past the latest id the copy may hold
        let mut count = 0;
        for t in times.try_iter()? {
            eid.clear();
            entry_id(&mut eid, key, t?.extract()?);
            let gone = PyBytes::new(py, &eid);
            if !fresh.discard(&gone)? && end.as_ref().is_none_or(|e| eid[..] >= e[..e.len() - 1]) {
                end = Some([&eid[..], &[0u8]].concat());
            }
            if pending.contains(&gone)? {
                pending.del_item(&gone)?;
            }
            queue.push(&eid, &gone, None)?;
            count += 1;
        }
        if let Some(end) = end {
            let prefix = PyBytes::new(py, &eid[..eid.len() - 8]);
            let raised = match cleared.get_item(&prefix)? {
                Some(old) => old.downcast::<PyBytes>()?.as_bytes() < &end[..],
                None => true,
            };
            if raised {
                cleared.set_item(prefix, PyBytes::new(py, &end))?;
            }
        }
        Ok(count)
    }

    /// A write-out's operations (`WindowStore._write_out`): the items of a `pending` map
    /// (entry id -> partial bytes, or None for a deletion) sorted by entry id (RocksDB's
    /// memtable takes sorted keys about twice as fast), written into WriteBatches piece by
    /// piece (`fill`). Sorting the ids as byte strings here costs a fraction of Python's
    /// `sorted` with a key function (which compares through the objects); filling a batch
    /// calls its `put`/`delete` per operation with no interpreter loop around them.
    /// O(p log p) for p operations, then O(1) per operation.
    #[pyclass(module = "stores._native", name = "SortedWrites", frozen, sequence)]
    pub struct SortedWrites {
        /// `(entry id, partial bytes or None)` in entry id order.
        items: Vec<(Py<PyBytes>, PyObject)>,
    }

    #[pymethods]
    impl SortedWrites {
        /// The items of `pending` in entry id order (every key must be bytes).
        #[new]
        fn new(pending: &Bound<'_, PyDict>) -> PyResult<Self> {
            let mut items: Vec<(Bound<'_, PyBytes>, Bound<'_, PyAny>)> =
                Vec::with_capacity(pending.len());
            for (eid, value) in pending.iter() {
                items.push((eid.downcast_into::<PyBytes>()?, value));
            }
            // sorted by each id's first bytes held inline (no pointer chased per comparison:
            // the ids lie scattered in memory), the whole ids compared only on a tie
            let mut order: Vec<([u8; SORT_PREFIX], u32)> = items
                .iter()
                .enumerate()
                .map(|(i, (eid, _))| {
                    let bytes = eid.as_bytes();
                    let mut prefix = [0u8; SORT_PREFIX];
                    let n = bytes.len().min(SORT_PREFIX);
                    prefix[..n].copy_from_slice(&bytes[..n]);
                    (prefix, i as u32)
                })
                .collect();
            order.sort_unstable_by(|a, b| {
                a.0.cmp(&b.0).then_with(|| {
                    items[a.1 as usize]
                        .0
                        .as_bytes()
                        .cmp(items[b.1 as usize].0.as_bytes())
                })
            });
            let mut slots: Vec<Option<(Bound<'_, PyBytes>, Bound<'_, PyAny>)>> =
                items.into_iter().map(Some).collect();
            Ok(SortedWrites {
                items: order
                    .into_iter()
                    .map(|(_, i)| {
                        let (eid, value) = slots[i as usize].take().expect("each index once");
                        (eid.unbind(), value.unbind())
                    })
                    .collect(),
            })
        }

        fn __len__(&self) -> usize {
            self.items.len()
        }

        /// `(entry id, partial bytes or None)` at `index` (in entry id order).
        fn __getitem__(&self, py: Python<'_>, index: usize) -> PyResult<(Py<PyBytes>, PyObject)> {
            let (eid, value) = self
                .items
                .get(index)
                .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err("index out of range"))?;
            Ok((eid.clone_ref(py), value.clone_ref(py)))
        }

        /// Write the items `start..stop` (clipped to the end) in order: `put(entry id,
        /// bytes)`, or `delete(entry id)` for None; the number written.
        fn fill(
            &self,
            put: &Bound<'_, PyAny>,
            delete: &Bound<'_, PyAny>,
            start: usize,
            stop: usize,
        ) -> PyResult<usize> {
            let py = put.py();
            let items = &self.items[start.min(self.items.len())..stop.min(self.items.len())];
            for (eid, value) in items {
                if value.is_none(py) {
                    delete.call1((eid,))?;
                } else {
                    put.call1((eid, value))?;
                }
            }
            Ok(items.len())
        }
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<SortedWrites>()?;
        m.add_class::<PyEffects>()?;
        m.add_function(wrap_pyfunction!(write_effects, m)?)?;
        m.add_function(wrap_pyfunction!(write_evictions, m)?)?;
        m.add_function(wrap_pyfunction!(write_expirations, m)?)?;
        m.add_function(wrap_pyfunction!(dumps_partial, m)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_take_marshal_forms() {
        let mut out = Vec::new();
        write_int(&mut out, -(1 << 31), 0);
        assert_eq!(out, [b'i', 0, 0, 0, 0x80]);
        out.clear();
        write_int(&mut out, 1 << 31, 0);
        // 2^31 = 2 * 2^30: digits 0, 0, 2 (base 2^15)
        assert_eq!(out, [b'l', 3, 0, 0, 0, 0, 0, 0, 0, 2, 0]);
        out.clear();
        write_int(&mut out, i64::MIN, 0);
        assert_eq!(out[..5], [b'l', 0xfb, 0xff, 0xff, 0xff]); // -5 digits
    }

    #[test]
    fn shared_objects_are_written_once_then_referenced() {
        let spec = Spec::new(&[Kind::Count, Kind::First, Kind::Last, Kind::Sum]);
        let mut out = Vec::new();
        marshal_fields(
            &spec,
            &[Val::Int(1), Val::Empty, Val::Empty, Val::Int(1)],
            &mut out,
        )
        .unwrap();
        let mut want = vec![b')' | 0x80, 4, b'i' | 0x80, 1, 0, 0, 0, b')' | 0x80, 0];
        want.extend([b'r', 2, 0, 0, 0, b'r', 1, 0, 0, 0]);
        assert_eq!(out, want);
    }

    #[test]
    fn entry_ids_and_upserts_have_the_python_layout() {
        let mut eid = Vec::new();
        entry_id(&mut eid, "é".as_bytes(), -1);
        assert_eq!(
            eid,
            [0, 0, 0, 2, 0xc3, 0xa9, 0x7f, 255, 255, 255, 255, 255, 255, 255]
        );
        let mut value = Vec::new();
        upsert(&mut value, 7, &[0], b"x");
        assert_eq!(value[..12], [0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1]);
        assert_eq!(value[12..], [0x80, 0, 0, 0, 0, 0, 0, 0, b'x']);
    }
}
