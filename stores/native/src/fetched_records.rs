//! The input records of one partition's Fetch response, decoded without a Python object per
//! record: the record batches' bytes (Kafka's v2 format, uncompressed) walked once into spans
//! (offset, timestamp, key, value) over the response's bytes, with exactly the records and
//! the next fetch offset aiokafka's consumer gives for them (`PartitionRecords` of aiokafka
//! 0.14: records before the fetch offset dropped, control batches skipped, with
//! `read_committed` the batches of aborted transactions too, a truncated last batch left for
//! the next fetch, CRCs checked). A compressed batch makes `decode` answer None, and the
//! Python front decodes the response's plain rewrite instead (`compressed_batches`); anything
//! else (a legacy batch, bytes aiokafka would refuse) makes it hand the whole response to
//! aiokafka, so the outcome is aiokafka's by construction
//! (tests/test_fetched_records.py compares them on random responses).

use crate::record_batch::crc32c;
use crate::state_codec::{be_i64, be_u32, nullable, varint};
use std::collections::HashSet;

/// Base offset and length before a batch's bytes (its size is this plus the length).
const LOG_OVERHEAD: usize = 12;
const HEADER_SIZE: usize = 61;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const FIRST_TIMESTAMP_OFFSET: usize = 27;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const PRODUCER_ID_OFFSET: usize = 43;
const RECORD_COUNT_OFFSET: usize = 57;
const COMPRESSION: u16 = 0x07;
const LOG_APPEND_TIME: u16 = 0x08;
const TRANSACTIONAL: u16 = 0x10;
const CONTROL: u16 = 0x20;

/// One record: where its key, value and headers are in the response's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    /// The batch's timestamp type is the broker's append time (else the producer's).
    pub log_append_time: bool,
    pub key: Option<(usize, usize)>,
    pub value: Option<(usize, usize)>,
    /// From the header count to the record's end.
    pub headers: (usize, usize),
}

/// The records of a response in offset order and the offset to fetch next.
#[derive(Debug, Default)]
pub struct Fetched {
    pub records: Vec<Record>,
    pub next_offset: i64,
}

/// `(start, end)` of nullable bytes `s` inside `data`.
fn span(data: &[u8], s: Option<&[u8]>) -> Option<(usize, usize)> {
    s.map(|s| {
        let start = s.as_ptr() as usize - data.as_ptr() as usize;
        (start, start + s.len())
    })
}

/// A record's headers from `*at` as aiokafka reads them (a count, then per header a UTF-8
/// name and nullable bytes); None where aiokafka raises.
fn skip_headers(batch: &[u8], at: &mut usize) -> Option<()> {
    let count = varint(batch, at).ok()?;
    if count < 0 {
        return None;
    }
    for _ in 0..count {
        let name_len = varint(batch, at).ok()?;
        if name_len < 0 {
            return None;
        }
        std::str::from_utf8(nullable(batch, at, name_len).ok()??).ok()?;
        let value_len = varint(batch, at).ok()?;
        nullable(batch, at, value_len).ok()?;
    }
    Some(())
}

/// The records of one whole uncompressed v2 batch (`base` its base offset), as aiokafka's
/// `DefaultRecordBatch` reads them; None where aiokafka raises (or could read otherwise: an
/// attributes byte beyond 7 bits, sums beyond int64). O(len(batch)).
fn batch_records(at_batch: usize, batch: &[u8]) -> Option<Vec<Record>> {
    let attributes = u16::from_be_bytes([batch[ATTRIBUTES_OFFSET], batch[ATTRIBUTES_OFFSET + 1]]);
    let log_append_time = attributes & LOG_APPEND_TIME != 0;
    let base = be_i64(batch, 0).ok()?;
    let first_ts = be_i64(batch, FIRST_TIMESTAMP_OFFSET).ok()?;
    let max_ts = be_i64(batch, MAX_TIMESTAMP_OFFSET).ok()?;
    let count = be_u32(batch, RECORD_COUNT_OFFSET).ok()? as i32;
    let count = usize::try_from(count).ok()?;
    let mut records = Vec::with_capacity(count.min(batch.len() / 7));
    let mut at = HEADER_SIZE;
    for _ in 0..count {
        let length = varint(batch, &mut at).ok()?;
        let start = at;
        if *batch.get(at)? >= 0x80 {
            return None;
        }
        at += 1; // attributes
        let ts_delta = varint(batch, &mut at).ok()?;
        let timestamp = if log_append_time {
            max_ts
        } else {
            first_ts.checked_add(ts_delta)?
        };
        let offset = base.checked_add(varint(batch, &mut at).ok()?)?;
        let key_len = varint(batch, &mut at).ok()?;
        let key = nullable(batch, &mut at, key_len).ok()?;
        let value_len = varint(batch, &mut at).ok()?;
        let value = nullable(batch, &mut at, value_len).ok()?;
        let headers_at = at;
        skip_headers(batch, &mut at)?;
        if i64::try_from(at - start).ok()? != length {
            return None;
        }
        let shift = |s: Option<(usize, usize)>| s.map(|(a, b)| (at_batch + a, at_batch + b));
        records.push(Record {
            offset,
            timestamp,
            log_append_time,
            key: shift(span(batch, key)),
            value: shift(span(batch, value)),
            headers: (at_batch + headers_at, at_batch + at),
        });
    }
    (at == batch.len()).then_some(records)
}

/// Whether the control batch `batch` is an abort marker (its first record's key is version 0,
/// type 0); None where aiokafka raises.
fn is_abort_marker(data: &[u8], at_batch: usize, batch: &[u8]) -> Option<bool> {
    let first = *batch_records(at_batch, batch)?.first()?;
    let (start, end) = first.key?;
    let key = data.get(start..end)?;
    (key.len() >= 4).then(|| key[..4] == [0, 0, 0, 0])
}

/// The records of a Fetch response's record bytes `data` that aiokafka's consumer gives for
/// a fetch at `fetch_offset`, and the offset it fetches next; `aborted`: with
/// `read_committed`, the response's aborted transactions `(producer id, first offset)` (None:
/// `read_uncommitted`). None (nothing decided) when a batch is compressed or of another
/// magic than 2, or aiokafka would raise on it. O(len(data)).
pub fn decode(
    data: &[u8],
    fetch_offset: i64,
    aborted: Option<&[(i64, i64)]>,
    check_crcs: bool,
) -> Option<Fetched> {
    let mut pending: Vec<(i64, i64)> = aborted.map(<[_]>::to_vec).unwrap_or_default();
    pending.sort_by_key(|&(_, first)| first); // stable, as Python's sorted
    let mut pending = pending.into_iter().peekable();
    let mut aborting: HashSet<i64> = HashSet::new();
    let mut fetched = Fetched {
        records: Vec::new(),
        next_offset: fetch_offset,
    };
    let mut pos = 0;
    while data.len() - pos >= LOG_OVERHEAD {
        let length = be_u32(data, pos + 8).ok()? as i32;
        let end = pos + LOG_OVERHEAD + usize::try_from(length).ok()?;
        if end > data.len() {
            break; // the broker cut the last batch at the fetch size: fetched again next time
        }
        let at_batch = pos;
        let batch = &data[pos..end];
        pos = end;
        if batch.len() < HEADER_SIZE || batch[MAGIC_OFFSET] != 2 {
            return None;
        }
        if check_crcs && crc32c(&batch[ATTRIBUTES_OFFSET..]) != be_u32(batch, CRC_OFFSET).ok()? {
            return None;
        }
        let attributes =
            u16::from_be_bytes([batch[ATTRIBUTES_OFFSET], batch[ATTRIBUTES_OFFSET + 1]]);
        let base = be_i64(batch, 0).ok()?;
        let last_delta = be_u32(batch, LAST_OFFSET_DELTA_OFFSET).ok()? as i32;
        let batch_next = base.checked_add(i64::from(last_delta) + 1)?;
        let control = attributes & CONTROL != 0;
        if control && attributes & COMPRESSION != 0 {
            return None;
        }
        if aborted.is_some() {
            let producer = be_i64(batch, PRODUCER_ID_OFFSET).ok()?;
            while let Some((id, _)) = pending.next_if(|&(_, first)| first <= base) {
                aborting.insert(id);
            }
            if control && is_abort_marker(data, at_batch, batch)? {
                aborting.remove(&producer);
            }
            if attributes & TRANSACTIONAL != 0 && aborting.contains(&producer) {
                fetched.next_offset = batch_next;
                continue;
            }
        }
        if control {
            fetched.next_offset = batch_next;
            continue;
        }
        if attributes & COMPRESSION != 0 {
            return None;
        }
        for record in batch_records(at_batch, batch)? {
            if record.offset < fetched.next_offset {
                continue;
            }
            fetched.next_offset = record.offset + 1;
            fetched.records.push(record);
        }
        fetched.next_offset = batch_next;
    }
    Some(fetched)
}

#[cfg(feature = "python")]
pub mod python {
    //! `stores._native.FetchedRecords`: the decoded records of one partition's fetch over its
    //! bytes, sliced without copying, read per column (offsets, timestamps) or, where one
    //! record is needed (a dead letter), as aiokafka's `ConsumerRecord`.
    use super::{decode, Record};
    use crate::compressed_batches::expand;
    use crate::py_sequence::SequenceIndex;
    use crate::state_codec::{nullable, varint};
    use pyo3::exceptions::{PyIndexError, PyValueError};
    use pyo3::prelude::*;
    use pyo3::sync::GILOnceCell;
    use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
    use std::sync::Arc;

    static CONSUMER_RECORD: GILOnceCell<PyObject> = GILOnceCell::new();

    /// The records `start..end` of one decoded fetch of `topic`'s `partition`, in offset
    /// order.
    #[pyclass(module = "stores._native", name = "FetchedRecords", frozen, sequence)]
    pub struct PyFetchedRecords {
        data: Py<PyBytes>,
        topic: Py<PyString>,
        partition: i32,
        records: Arc<Vec<Record>>,
        start: usize,
        end: usize,
        next_offset: i64,
    }

    impl PyFetchedRecords {
        /// The records of this view.
        pub(crate) fn records(&self) -> &[Record] {
            &self.records[self.start..self.end]
        }

        /// The fetched bytes the spans point into.
        pub(crate) fn data<'py>(&self, py: Python<'py>) -> &Bound<'py, PyBytes> {
            self.data.bind(py)
        }

        fn view(&self, py: Python<'_>, start: usize, end: usize) -> Self {
            PyFetchedRecords {
                data: self.data.clone_ref(py),
                topic: self.topic.clone_ref(py),
                partition: self.partition,
                records: self.records.clone(),
                start: self.start + start,
                end: self.start + end,
                next_offset: self.next_offset,
            }
        }

        /// The index in this view of the first record at an offset >= `offset`.
        fn first_at(&self, offset: i64) -> usize {
            self.records().partition_point(|r| r.offset < offset)
        }

        /// aiokafka's `ConsumerRecord` of `record` (headers decoded, checksum None).
        pub(crate) fn consumer_record(
            &self,
            py: Python<'_>,
            record: &Record,
        ) -> PyResult<PyObject> {
            let class = CONSUMER_RECORD.get_or_try_init(py, || {
                Ok::<_, PyErr>(
                    py.import("aiokafka.structs")?
                        .getattr("ConsumerRecord")?
                        .unbind(),
                )
            })?;
            let data = self.data.bind(py).as_bytes();
            let bytes = |s: Option<(usize, usize)>| s.map(|(a, b)| PyBytes::new(py, &data[a..b]));
            let size = |s: Option<(usize, usize)>| s.map_or(-1, |(a, b)| (b - a) as i64);
            let (mut at, end) = record.headers;
            let headers_data = &data[..end];
            let count = varint(headers_data, &mut at).unwrap_or(0);
            let mut headers = Vec::new();
            for _ in 0..count {
                let invalid = || PyValueError::new_err("a record header outside its record");
                let len = varint(headers_data, &mut at).map_err(|_| invalid())?;
                let name = nullable(headers_data, &mut at, len).map_err(|_| invalid())?;
                let len = varint(headers_data, &mut at).map_err(|_| invalid())?;
                let value = nullable(headers_data, &mut at, len).map_err(|_| invalid())?;
                let name = std::str::from_utf8(name.unwrap_or_default())
                    .map_err(|_| PyValueError::new_err("a header name is not UTF-8"))?;
                headers.push((PyString::new(py, name), value.map(|v| PyBytes::new(py, v))));
            }
            class.call1(
                py,
                (
                    self.topic.clone_ref(py),
                    self.partition,
                    record.offset,
                    record.timestamp,
                    i32::from(record.log_append_time),
                    bytes(record.key),
                    bytes(record.value),
                    py.None(),
                    size(record.key),
                    size(record.value),
                    PyTuple::new(py, headers)?,
                ),
            )
        }
    }

    #[pymethods]
    impl PyFetchedRecords {
        /// The records aiokafka's consumer gives for a fetch of `topic`'s `partition` at
        /// `fetch_offset` whose response holds the record bytes `data` (`aborted`: the
        /// aborted transactions with `read_committed`, None with `read_uncommitted`), or None
        /// when the response holds a batch not decoded here (legacy, a codec's bytes that do
        /// not decompress, or bytes aiokafka refuses): then aiokafka must read it. Compressed
        /// batches are decoded from their plain rewrite (`compressed_batches::expand`, one
        /// copy). O(len(data)) plus what decompresses, no Python object per record.
        #[staticmethod]
        #[pyo3(signature = (data, topic, partition, fetch_offset, aborted, check_crcs=true))]
        fn decode(
            data: Bound<'_, PyBytes>,
            topic: Bound<'_, PyString>,
            partition: i32,
            fetch_offset: i64,
            aborted: Option<Vec<(i64, i64)>>,
            check_crcs: bool,
        ) -> Option<Self> {
            let plain = decode(
                data.as_bytes(),
                fetch_offset,
                aborted.as_deref(),
                check_crcs,
            );
            let (data, fetched) = match plain {
                Some(fetched) => (data, fetched),
                None => {
                    // compressed batches: decoded from their plain rewrite
                    let expanded = expand(data.as_bytes(), check_crcs)?;
                    let fetched = decode(&expanded, fetch_offset, aborted.as_deref(), false)?;
                    (PyBytes::new(data.py(), &expanded), fetched)
                }
            };
            let end = fetched.records.len();
            Some(PyFetchedRecords {
                data: data.unbind(),
                topic: topic.unbind(),
                partition,
                records: Arc::new(fetched.records),
                start: 0,
                end,
                next_offset: fetched.next_offset,
            })
        }

        /// The offset the consumer fetches next after this response.
        #[getter]
        fn next_offset(&self) -> i64 {
            self.next_offset
        }

        /// The offset of the last record (IndexError if none).
        #[getter]
        fn last_offset(&self) -> PyResult<i64> {
            self.records()
                .last()
                .map(|r| r.offset)
                .ok_or_else(|| PyIndexError::new_err("no records"))
        }

        #[getter]
        fn topic(&self, py: Python<'_>) -> Py<PyString> {
            self.topic.clone_ref(py)
        }

        #[getter]
        fn partition(&self) -> i32 {
            self.partition
        }

        fn __len__(&self) -> usize {
            self.end - self.start
        }

        /// A record as a `ConsumerRecord`, or a slice (step 1) as a view.
        fn __getitem__(&self, py: Python<'_>, index: &Bound<'_, PyAny>) -> PyResult<PyObject> {
            match SequenceIndex::resolve(index, self.__len__(), "record")? {
                SequenceIndex::Slice(start, stop) => {
                    Ok(Py::new(py, self.view(py, start, stop))?.into_any())
                }
                SequenceIndex::Item(i) => self.consumer_record(py, &self.records()[i]),
            }
        }

        fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            let list = PyList::empty(py);
            for record in self.records() {
                list.append(self.consumer_record(py, record)?)?;
            }
            list.try_iter().map(Bound::into_any)
        }

        /// The records at offsets above `offset` (the ones not applied yet).
        fn after(&self, py: Python<'_>, offset: i64) -> Self {
            let start = offset
                .checked_add(1)
                .map_or(self.__len__(), |o| self.first_at(o));
            self.view(py, start, self.__len__())
        }

        /// The offsets, in order.
        fn offsets(&self) -> Vec<i64> {
            self.records().iter().map(|r| r.offset).collect()
        }

        /// The Kafka timestamps, in order.
        fn timestamps(&self) -> Vec<i64> {
            self.records().iter().map(|r| r.timestamp).collect()
        }

        /// The record at `offset` as a `ConsumerRecord` (KeyError if none).
        fn record_at(&self, py: Python<'_>, offset: i64) -> PyResult<PyObject> {
            let i = self.first_at(offset);
            match self.records().get(i) {
                Some(record) if record.offset == offset => self.consumer_record(py, record),
                _ => Err(pyo3::exceptions::PyKeyError::new_err(offset)),
            }
        }

        /// The Kafka timestamp of the record at `offset` (KeyError if none). O(log n).
        fn timestamp_at(&self, offset: i64) -> PyResult<i64> {
            let i = self.first_at(offset);
            match self.records().get(i) {
                Some(record) if record.offset == offset => Ok(record.timestamp),
                _ => Err(pyo3::exceptions::PyKeyError::new_err(offset)),
            }
        }
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<PyFetchedRecords>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_batch::{put_tail, RecordBatch};

    fn batch(base: i64, records: &[(i64, &[u8])]) -> Vec<u8> {
        let mut b = RecordBatch::new(1 << 20, false);
        for (ts, value) in records {
            let mut tail = Vec::new();
            put_tail(&mut tail, Some(b"k"), Some(value), std::iter::empty());
            assert!(b.append(*ts, &tail));
        }
        let mut bytes = b.build().to_vec();
        bytes[..8].copy_from_slice(&base.to_be_bytes());
        let crc = crc32c(&bytes[ATTRIBUTES_OFFSET..]);
        bytes[CRC_OFFSET..ATTRIBUTES_OFFSET].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    #[test]
    fn records_before_the_fetch_offset_and_a_cut_last_batch_are_left_out() {
        let mut data = batch(10, &[(5, b"a"), (7, b"bb")]);
        data.extend(batch(12, &[(9, b"c")]));
        let whole = data.len();
        data.extend(&batch(13, &[(9, b"d")])[..30]);
        let fetched = decode(&data, 11, None, true).unwrap();
        let offsets: Vec<i64> = fetched.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [11, 12]);
        assert_eq!(fetched.records[0].timestamp, 7);
        let (a, b) = fetched.records[0].value.unwrap();
        assert_eq!(&data[a..b], b"bb");
        assert_eq!(fetched.next_offset, 13);
        assert!(whole < data.len());
    }

    #[test]
    fn a_bad_crc_or_a_compressed_batch_is_left_to_aiokafka() {
        let mut data = batch(0, &[(1, b"a")]);
        data[HEADER_SIZE + 3] ^= 1;
        assert!(decode(&data, 0, None, true).is_none());
        let mut data = batch(0, &[(1, b"a")]);
        data[ATTRIBUTES_OFFSET + 1] |= 1; // gzip
        let crc = crc32c(&data[ATTRIBUTES_OFFSET..]);
        data[CRC_OFFSET..ATTRIBUTES_OFFSET].copy_from_slice(&crc.to_be_bytes());
        assert!(decode(&data, 0, None, true).is_none());
    }
}
