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
pub(crate) const TIME_BIAS: u64 = 1 << 63;
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
    //! `stores._native.write_effects` / `write_evictions` / `write_expirations`: the store's
    //! writes of a slice of effects into its coalesced local writes (`pending`, a native
    //! `PendingWrites`: no Python object per entry) and its changelog queue (a native
    //! `ChangelogRecords`, or a list of `(entry id, value or None)`), one call per slice.
    use super::{entry_id, upsert, write_int, write_tuple_header, FLAG_REF, TIME_BIAS};
    use crate::pending_writes::python::PyPendingWrites;
    use crate::py_sequence::SequenceIndex;
    use crate::record_batch::python::PyChangelogRecords;
    use pyo3::exceptions::{PyTypeError, PyValueError};
    use pyo3::ffi;
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
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

        /// Queue `(eid, value)` (Python objects made only for a list).
        fn push(&mut self, eid: &[u8], value: Option<&[u8]>) -> PyResult<()> {
            match self {
                Queue::Native(queue) => {
                    queue.push(eid, value);
                    Ok(())
                }
                Queue::List(list) => {
                    let py = list.py();
                    list.append((PyBytes::new(py, eid), value.map(|v| PyBytes::new(py, v))))
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
            match SequenceIndex::resolve(index, self.__len__(), "effect")? {
                SequenceIndex::Slice(start, stop) => {
                    let view = PyEffects {
                        data: self.data.clone(),
                        start: self.start + start,
                        end: self.start + stop,
                    };
                    Ok(Py::new(py, view)?.into_any())
                }
                SequenceIndex::Item(i) => Ok(self.item(py, self.start + i)?.into_any().unbind()),
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
        partition: i64,
        applied: i64,
        horizon: Option<i64>,
        pending: PyRefMut<'py, PyPendingWrites>,
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
            data: &[u8],
            evicted: &[i64],
        ) -> PyResult<()> {
            if offset <= self.applied {
                return Err(PyValueError::new_err(format!(
                    "offset {offset} of partition {} is not after the applied offset {}: a \
                     redelivered record must be skipped",
                    self.partition, self.applied
                )));
            }
            let prefix = 4 + key.len();
            self.eid.clear();
            entry_id(&mut self.eid, key, time);
            self.value.clear();
            upsert(&mut self.value, offset, evicted, data);
            let fresh = self.horizon.is_none_or(|h| time > h);
            if fresh {
                self.horizon = Some(time);
            }
            let pending = &mut self.pending.inner;
            pending.put(&self.eid[..prefix], time, data, fresh);
            self.queue.push(&self.eid, Some(&self.value))?;
            for &t in evicted {
                self.eid.clear();
                entry_id(&mut self.eid, key, t);
                pending.forget(&self.eid[..prefix], t);
                self.queue.push(&self.eid, None)?;
            }
            self.applied = offset;
            Ok(())
        }
    }

    /// Write effects `effects` (a list of `(offset, key, time, partial)` or
    /// `(offset, key, time, partial, evicted_times)`, or an `Effects` buffer of encoded
    /// ones, read without a Python object each), in order, as `WindowStore.record_many`
    /// does: per effect the entry put in `pending` (a `PendingWrites`; fresh when its time
    /// is after `horizon`, which then moves to it), each evicted entry forgotten there, and
    /// onto `queued` (a `ChangelogRecords`, written into with no Python object, or a list)
    /// the upsert `(entry id, header + evicted times + partial bytes)` and a tombstone
    /// `(entry id, None)` per evicted time. The partial bytes are the partial itself when
    /// `encoded` (bytes the codec wrote), else its marshal bytes (`encode(partial)` for what
    /// is not native). Returns `(applied offset, horizon)`; a ValueError, as the Python
    /// path's, for an offset not after the applied one (the effects before it written, as
    /// there). O(effects + evicted times).
    #[pyfunction]
    #[pyo3(signature = (effects, applied, partition, encoded, encode, pending, horizon, queued))]
    #[allow(clippy::too_many_arguments)]
    fn write_effects<'py>(
        effects: &Bound<'py, PyAny>,
        applied: i64,
        partition: i64,
        encoded: bool,
        encode: &Bound<'py, PyAny>,
        pending: &Bound<'py, PyPendingWrites>,
        horizon: Option<i64>,
        queued: &Bound<'py, PyAny>,
    ) -> PyResult<(i64, Option<i64>)> {
        let mut writer = Writer {
            partition,
            applied,
            horizon,
            pending: pending.borrow_mut(),
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
        let py = effects.py();
        if let Ok(buffer) = effects.downcast::<PyEffects>() {
            let buffer = buffer.get();
            let d = &buffer.data;
            for i in buffer.start..buffer.end {
                let key = d.keys[d.key_of[i] as usize].bind(py).to_str()?;
                writer.write(
                    d.offsets[i],
                    key.as_bytes(),
                    d.times[i],
                    d.partial(i),
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
            writer.write(offset, key, time, data.as_bytes(), &evicted)?;
        }
        Ok(())
    }

    /// The deletions of `key`'s entries at `times` (`evict`, `expire`): `each(key prefix,
    /// time)` per entry, in order, and a tombstone `(entry id, None)` each onto
    /// `queued`; returns their number. O(len(times)).
    fn write_deletions(
        key: &Bound<'_, PyAny>,
        times: &Bound<'_, PyAny>,
        queued: &Bound<'_, PyAny>,
        mut each: impl FnMut(&[u8], i64),
    ) -> PyResult<usize> {
        let key = utf8(key)?;
        let prefix = 4 + key.len();
        let mut queue = Queue::of(queued)?;
        let mut eid: Vec<u8> = Vec::with_capacity(64);
        let mut count = 0;
        for t in times.try_iter()? {
            let t: i64 = t?.extract()?;
            eid.clear();
            entry_id(&mut eid, key, t);
            each(&eid[..prefix], t);
            queue.push(&eid, None)?;
            count += 1;
        }
        Ok(count)
    }

    /// `WindowStore.evict`'s writes of `key`'s entries at `times`: each forgotten in
    /// `pending` (dropped if fresh, else a delete) and a tombstone `(entry id, None)` each
    /// onto `queued`; returns their number.
    #[pyfunction]
    fn write_evictions(
        key: &Bound<'_, PyAny>,
        times: &Bound<'_, PyAny>,
        pending: &Bound<'_, PyPendingWrites>,
        queued: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let pending = &mut pending.borrow_mut().inner;
        write_deletions(key, times, queued, |prefix, t| pending.forget(prefix, t))
    }

    /// `WindowStore.expire`'s writes of `key`'s expired entries at `times` (all of its
    /// entries up to the latest of them): each dropped from `pending`, and if any was not
    /// fresh (the local copy may hold it), `cleared[key prefix]` raised to just past the
    /// latest expired id (the copy's range deletion); a tombstone `(entry id, None)` each
    /// onto `queued`. Returns their number.
    #[pyfunction]
    fn write_expirations<'py>(
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        times: &Bound<'py, PyAny>,
        pending: &Bound<'py, PyPendingWrites>,
        cleared: &Bound<'py, PyDict>,
        queued: &Bound<'py, PyAny>,
    ) -> PyResult<usize> {
        let mut held = false; // an entry the local copy may hold
        let mut latest: u64 = 0; // the latest expired id's biased time
        let mut prefix: Vec<u8> = Vec::new();
        let count = {
            let pending = &mut pending.borrow_mut().inner;
            write_deletions(key, times, queued, |key_prefix, t| {
                held |= pending.expire(key_prefix, t);
                latest = latest.max((t as u64) ^ TIME_BIAS);
                if prefix.is_empty() {
                    prefix.extend_from_slice(key_prefix);
                }
            })?
        };
        if held {
            let mut end = prefix.clone();
            end.extend_from_slice(&latest.to_be_bytes());
            end.push(0);
            let raised = match cleared.get_item(PyBytes::new(py, &prefix))? {
                Some(old) => old.downcast::<PyBytes>()?.as_bytes() < &end[..],
                None => true,
            };
            if raised {
                cleared.set_item(PyBytes::new(py, &prefix), PyBytes::new(py, &end))?;
            }
        }
        Ok(count)
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
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
