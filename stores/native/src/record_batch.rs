//! Kafka record batches (magic 2, uncompressed) as a producer writes them, and Kafka's default
//! partitioner: the bytes aiokafka's `DefaultRecordBatchBuilder` (its C build) writes for the
//! same records, byte for byte (`tests/test_record_batches.py` compares them), so that a whole
//! chunk of output records is encoded in one call instead of one Python call per record.
//!
//! A record's key, value and headers are encoded once (`put_tail`, when it is queued); the
//! batch adds its length, timestamp delta and offset delta (`RecordBatch::append`) and, when
//! built, the header with the CRC-32C of everything after the CRC field.

/// The batch header's size: base offset (8), length (4), partition leader epoch (4), magic
/// (1), CRC (4), attributes (2), last offset delta (4), first and max timestamps (8 + 8),
/// producer id (8), producer epoch (2), base sequence (4), record count (4).
pub const HEADER_SIZE: usize = 61;
const LEADER_EPOCH_OFFSET: usize = 12;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const TRANSACTIONAL: i16 = 0x10;
/// The first timestamp of a batch without one yet (and aiokafka's C builder's sentinel: a
/// record whose timestamp is -1 leaves the batch without a first timestamp).
const NO_TIMESTAMP: i64 = -1;

/// CRC-32C (Castagnoli) of `data`, as Kafka checks a batch: the SSE 4.2 instruction where
/// the CPU has it (8 bytes per instruction), else a table. O(len(data)).
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked just above)
        return unsafe { crc32c_sse42(data) };
    }
    crc32c_table(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = data.chunks_exact(8);
    let mut crc = u64::from(u32::MAX);
    for word in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(word.try_into().unwrap()));
    }
    let mut crc = crc as u32;
    for &byte in words.remainder() {
        crc = _mm_crc32_u8(crc, byte);
    }
    !crc
}

const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-32C by table, a byte at a time (the fallback of `crc32c`).
pub fn crc32c_table(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &byte in data {
        crc = CRC32C_TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Appends `value` as a Kafka varint (zigzag, 7 bits a byte, least significant first).
pub fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut z = zigzag(value);
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// The bytes `put_varint` writes for `value`.
pub fn varint_size(value: i64) -> usize {
    let bits = 64 - (zigzag(value) | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends Kafka's nullable bytes: the length as a varint (-1 for None), then the bytes.
pub fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(bytes) => {
            put_varint(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}

/// Appends what follows a record's offset delta: key, value, header count and headers (name
/// as UTF-8, value nullable).
pub fn put_tail<'a>(
    out: &mut Vec<u8>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl ExactSizeIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) {
    put_bytes(out, key);
    put_bytes(out, value);
    put_varint(out, headers.len() as i64);
    for (name, value) in headers {
        put_bytes(out, Some(name));
        put_bytes(out, value);
    }
}

/// Reads the varint at `*pos` (as `put_varint` wrote it), moving `pos` past it.
pub fn read_varint(data: &[u8], pos: &mut usize) -> i64 {
    let mut z: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = data[*pos];
        *pos += 1;
        z |= u64::from(byte & 0x7F) << shift;
        if byte < 0x80 {
            break;
        }
        shift += 7;
    }
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Reads nullable bytes (as `put_bytes` wrote them) at `*pos`, moving `pos` past them.
pub fn read_bytes<'a>(data: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let length = read_varint(data, pos);
    if length < 0 {
        return None;
    }
    let start = *pos;
    *pos += length as usize;
    Some(&data[start..*pos])
}

/// A tail's key, value and headers (as `put_tail` wrote them).
pub type Tail<'a> = (
    Option<&'a [u8]>,
    Option<&'a [u8]>,
    Vec<(&'a [u8], Option<&'a [u8]>)>,
);

/// Splits a tail `put_tail` wrote into its key, value and headers.
pub fn read_tail(tail: &[u8]) -> Tail<'_> {
    let mut pos = 0;
    let key = read_bytes(tail, &mut pos);
    let value = read_bytes(tail, &mut pos);
    let count = read_varint(tail, &mut pos);
    let headers = (0..count)
        .map(|_| {
            let name = read_bytes(tail, &mut pos).unwrap_or_default();
            (name, read_bytes(tail, &mut pos))
        })
        .collect();
    (key, value, headers)
}

/// Kafka's murmur2 of `data` (the Java client's `Utils.murmur2`, seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = 0x9747_b28c ^ (length as u32);
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes(word.try_into().unwrap());
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = words.remainder();
    if rest.len() == 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `key` among `partitions` under Kafka's default partitioner.
pub fn default_partition(key: &[u8], partitions: usize) -> usize {
    (murmur2(key) & 0x7FFF_FFFF) as usize % partitions
}

/// One record batch being written: records appended in order up to `batch_size` bytes (a
/// first record always fits), then built once with the producer's state.
pub struct RecordBatch {
    buffer: Vec<u8>,
    batch_size: usize,
    transactional: bool,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    records: i32,
}

impl RecordBatch {
    /// An empty batch of at most `batch_size` bytes (one record may exceed it), flagged
    /// transactional or not, without a producer id (-1, epoch -1, sequence 0) until
    /// `set_producer_state`.
    pub fn new(batch_size: usize, transactional: bool) -> Self {
        RecordBatch {
            buffer: vec![0; HEADER_SIZE],
            batch_size,
            transactional,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: 0,
            first_timestamp: NO_TIMESTAMP,
            max_timestamp: NO_TIMESTAMP,
            records: 0,
        }
    }

    /// The record count.
    pub fn records(&self) -> i32 {
        self.records
    }

    /// The bytes written so far (header included).
    pub fn size(&self) -> usize {
        self.buffer.len()
    }

    /// The size the record of timestamp `timestamp` and encoded tail of `tail_len` bytes
    /// would add (its length varint included).
    fn record_size(&self, timestamp: i64, tail_len: usize) -> (usize, i64) {
        let delta = if self.first_timestamp == NO_TIMESTAMP {
            0
        } else {
            timestamp - self.first_timestamp
        };
        let body = 1 + varint_size(delta) + varint_size(i64::from(self.records)) + tail_len;
        (body, delta)
    }

    /// Appends the record of Kafka timestamp `timestamp` (epoch ms) whose key, value and
    /// headers `put_tail` encoded as `tail`; false, appending nothing, when it would take the
    /// batch to `batch_size` bytes or more (never for the first record). O(len(tail)).
    pub fn append(&mut self, timestamp: i64, tail: &[u8]) -> bool {
        let (body, delta) = self.record_size(timestamp, tail.len());
        let size = body + varint_size(body as i64);
        if self.records != 0 && self.buffer.len() + size >= self.batch_size {
            return false;
        }
        if self.first_timestamp == NO_TIMESTAMP {
            self.first_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        let buffer = &mut self.buffer;
        buffer.reserve(size);
        put_varint(buffer, body as i64);
        buffer.push(0); // attributes
        put_varint(buffer, delta);
        put_varint(buffer, i64::from(self.records));
        buffer.extend_from_slice(tail);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        self.records += 1;
        true
    }

    /// The producer id, epoch and first sequence number the batch is sent with (idempotence
    /// and transactions).
    pub fn set_producer_state(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
    }

    /// Writes the header (CRC last) and returns the whole batch. Repeatable: the header is
    /// rewritten from the current state each time.
    pub fn build(&mut self) -> &[u8] {
        let length = (self.buffer.len() - LEADER_EPOCH_OFFSET) as i32;
        let attributes = if self.transactional { TRANSACTIONAL } else { 0 };
        let last_offset_delta = (self.records - 1).max(0);
        let mut header = Vec::with_capacity(HEADER_SIZE);
        header.extend_from_slice(&0i64.to_be_bytes()); // base offset: the broker's
        header.extend_from_slice(&length.to_be_bytes());
        header.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        header.push(2); // magic
        header.extend_from_slice(&0u32.to_be_bytes()); // CRC, below
        header.extend_from_slice(&attributes.to_be_bytes());
        header.extend_from_slice(&last_offset_delta.to_be_bytes());
        header.extend_from_slice(&self.first_timestamp.to_be_bytes());
        header.extend_from_slice(&self.max_timestamp.to_be_bytes());
        header.extend_from_slice(&self.producer_id.to_be_bytes());
        header.extend_from_slice(&self.producer_epoch.to_be_bytes());
        header.extend_from_slice(&self.base_sequence.to_be_bytes());
        header.extend_from_slice(&self.records.to_be_bytes());
        debug_assert_eq!(header.len(), HEADER_SIZE);
        self.buffer[..HEADER_SIZE].copy_from_slice(&header);
        let crc = crc32c(&self.buffer[ATTRIBUTES_OFFSET..]);
        self.buffer[CRC_OFFSET..ATTRIBUTES_OFFSET].copy_from_slice(&crc.to_be_bytes());
        &self.buffer
    }
}

/// Records queued for one topic, per partition: each record's encoded tail in one buffer per
/// partition, with its timestamp (None: the clock when it is put in a batch). O(record) per
/// record; nothing per record on the Python heap.
#[derive(Default)]
pub struct PartitionQueue {
    tails: Vec<u8>,
    /// (timestamp or None, end of the tail in `tails`), in order
    records: Vec<(Option<i64>, usize)>,
    /// the first record not yet put in a batch
    next: usize,
}

impl PartitionQueue {
    /// Queues a record (`tail` from `put_tail`).
    pub fn push(&mut self, timestamp: Option<i64>, tail_writer: impl FnOnce(&mut Vec<u8>)) {
        tail_writer(&mut self.tails);
        self.records.push((timestamp, self.tails.len()));
    }

    /// Records queued and not yet in a batch.
    pub fn pending(&self) -> usize {
        self.records.len() - self.next
    }

    /// The records not yet in a batch, in order: (timestamp, tail).
    pub fn iter(&self) -> impl Iterator<Item = (Option<i64>, &[u8])> {
        (self.next..self.records.len()).map(|i| {
            let begin = if i == 0 { 0 } else { self.records[i - 1].1 };
            let (timestamp, end) = self.records[i];
            (timestamp, &self.tails[begin..end])
        })
    }

    /// Moves the records next in line into `batch` while they fit (at least one if the batch
    /// is empty); a record without a timestamp gets `now_ms`. How many it moved.
    pub fn fill(&mut self, batch: &mut RecordBatch, now_ms: i64) -> usize {
        let start = self.next;
        while self.next < self.records.len() {
            let (timestamp, end) = self.records[self.next];
            let begin = if self.next == 0 {
                0
            } else {
                self.records[self.next - 1].1
            };
            if !batch.append(timestamp.unwrap_or(now_ms), &self.tails[begin..end]) {
                break;
            }
            self.next += 1;
        }
        let moved = self.next - start;
        if self.next == self.records.len() {
            self.tails.clear();
            self.records.clear();
            self.next = 0;
        }
        moved
    }
}

/// This machine's clock in epoch milliseconds (what aiokafka stamps a record without a
/// timestamp with).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `ms` as a Kafka timestamp a broker accepts (`agents.batched_send.kafka_timestamp`): None
/// for none or one before 1970, at most `now`.
pub fn kafka_timestamp(ms: Option<i64>, now: i64) -> Option<i64> {
    ms.filter(|&ms| ms >= 0).map(|ms| ms.min(now))
}

#[cfg(feature = "python")]
pub mod python {
    //! `stores._native.RecordBatchBuilder` (aiokafka's `BatchBuilder` as the producer's
    //! accumulator and sender use it), `QueuedRecords` (records of one partition encoded once,
    //! moved into builders by `fill`), `OutputQueue` (records queued per partition of their
    //! key), `KeyedRecords` (records made in Rust, queued by `OutputQueue.add_records`) and
    //! `murmur2`.
    use super::{
        default_partition, kafka_timestamp, now_ms, put_tail, read_tail, PartitionQueue,
        RecordBatch,
    };
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;
    use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
    use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

    type Header = (PyBackedStr, Option<PyBackedBytes>);

    fn headers_of(headers: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Header>> {
        match headers {
            Some(h) if !h.is_none() && h.len()? > 0 => h.extract(),
            _ => Ok(Vec::new()),
        }
    }

    fn write_tail(out: &mut Vec<u8>, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header]) {
        let headers = headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_deref()));
        put_tail(out, key, value, headers);
    }

    /// Where a record landed in its batch (aiokafka's `DefaultRecordMetadata`: what
    /// `MessageBatch.done` reads).
    #[pyclass(module = "stores._native", name = "RecordMetadata", frozen)]
    pub struct RecordMetadata {
        #[pyo3(get)]
        offset: i64,
        #[pyo3(get)]
        size: usize,
        #[pyo3(get)]
        timestamp: i64,
    }

    #[pymethods]
    impl RecordMetadata {
        #[getter]
        fn crc(&self) -> Option<u32> {
            None
        }
    }

    /// One Kafka record batch (magic 2, uncompressed) for aiokafka's producer: what
    /// `AIOKafkaProducer.create_batch` returns, byte for byte (`_build`), and usable wherever
    /// aiokafka uses its `BatchBuilder` (`send_batch`, `MessageBatch`, the sender, the
    /// accumulator's `_set_producer_state` for idempotence and transactions). `batch_size`
    /// and `is_transactional` must be the producer's (`agents.batched_send.native_builder`).
    #[pyclass(module = "stores._native", name = "RecordBatchBuilder")]
    pub struct PyRecordBatchBuilder {
        batch: RecordBatch,
        closed: bool,
        built: Option<Py<PyBytes>>,
    }

    impl PyRecordBatchBuilder {
        /// Moves the records next in line in `queue` into this batch while they fit (at least
        /// one into an empty batch; none into a closed one), closing it if records remain:
        /// how many it moved. A record without a timestamp gets the clock's.
        fn fill_from(&mut self, queue: &mut PartitionQueue) -> usize {
            if self.closed {
                return 0;
            }
            let moved = queue.fill(&mut self.batch, now_ms());
            if queue.pending() > 0 {
                self.closed = true;
            }
            moved
        }
    }

    #[pymethods]
    impl PyRecordBatchBuilder {
        #[new]
        #[pyo3(signature = (batch_size, is_transactional = false))]
        fn new(batch_size: usize, is_transactional: bool) -> Self {
            PyRecordBatchBuilder {
                batch: RecordBatch::new(batch_size, is_transactional),
                closed: false,
                built: None,
            }
        }

        /// `BatchBuilder.append`: the record's metadata, or None (and closed) when the
        /// batch is full or closed. `timestamp` None: this machine's clock.
        #[pyo3(signature = (*, timestamp, key, value, headers = None))]
        fn append(
            &mut self,
            timestamp: Option<i64>,
            key: Option<PyBackedBytes>,
            value: Option<PyBackedBytes>,
            headers: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<Option<RecordMetadata>> {
            if self.closed {
                return Ok(None);
            }
            let mut tail = Vec::new();
            write_tail(
                &mut tail,
                key.as_deref(),
                value.as_deref(),
                &headers_of(headers)?,
            );
            let timestamp = timestamp.unwrap_or_else(now_ms);
            let (before, offset) = (self.batch.size(), i64::from(self.batch.records()));
            if !self.batch.append(timestamp, &tail) {
                self.closed = true;
                return Ok(None);
            }
            let size = self.batch.size() - before;
            Ok(Some(RecordMetadata {
                offset,
                size,
                timestamp,
            }))
        }

        /// `BatchBuilder.close`: no more records.
        fn close(&mut self) {
            self.closed = true;
        }

        /// `BatchBuilder.closed`.
        fn closed(&self) -> bool {
            self.closed
        }

        /// `BatchBuilder.record_count`.
        fn record_count(&self) -> i32 {
            self.batch.records()
        }

        /// `BatchBuilder.size`: the bytes written so far.
        fn size(&self) -> usize {
            self.batch.size()
        }

        /// `BatchBuilder._set_producer_state` (the accumulator's, when it drains the batch
        /// of an idempotent or transactional producer).
        fn _set_producer_state(
            &mut self,
            producer_id: i64,
            producer_epoch: i16,
            base_sequence: i32,
        ) {
            self.batch
                .set_producer_state(producer_id, producer_epoch, base_sequence);
        }

        /// `BatchBuilder._build`: the batch's bytes (closed; the same bytes on later calls).
        fn _build(&mut self, py: Python<'_>) -> Py<PyBytes> {
            self.closed = true;
            let batch = &mut self.batch;
            self.built
                .get_or_insert_with(|| PyBytes::new(py, batch.build()).unbind())
                .clone_ref(py)
        }
    }

    /// Output records of one partition, each encoded once, in order: `fill` moves the ones
    /// next in line into a `RecordBatchBuilder`; iterating gives the ones left as
    /// `(key, value, timestamp, headers)` tuples (`agents.batched_send.OutputRecord`).
    #[pyclass(module = "stores._native", name = "QueuedRecords")]
    pub struct PyQueuedRecords {
        queue: PartitionQueue,
    }

    #[pymethods]
    impl PyQueuedRecords {
        /// `records`: `(key, value, timestamp, headers)` tuples (timestamp None: the clock
        /// when it goes into a batch), or `(key, value)` pairs (no timestamp, no headers: the
        /// changelog's records, `agents.batched_send.send_records`, with no tuple made per
        /// record in Python). O(bytes) in one call.
        #[new]
        #[pyo3(signature = (records = None))]
        fn new(records: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
            let mut queue = PartitionQueue::default();
            if let Some(records) = records {
                for record in records.try_iter()? {
                    let record = record?;
                    let record = record.downcast::<PyTuple>()?;
                    let full = match record.len() {
                        4 => true,
                        2 => false,
                        _ => {
                            return Err(PyValueError::new_err(
                                "an output record is (key, value, timestamp, headers) or \
                                 (key, value)",
                            ))
                        }
                    };
                    let key: Option<PyBackedBytes> = record.get_item(0)?.extract()?;
                    let value: Option<PyBackedBytes> = record.get_item(1)?.extract()?;
                    let (timestamp, headers) = if full {
                        let timestamp: Option<i64> = record.get_item(2)?.extract()?;
                        (timestamp, headers_of(Some(&record.get_item(3)?))?)
                    } else {
                        (None, headers_of(None)?)
                    };
                    queue.push(timestamp, |out| {
                        write_tail(out, key.as_deref(), value.as_deref(), &headers)
                    });
                }
            }
            Ok(PyQueuedRecords { queue })
        }

        /// Moves the records next in line into `builder` while they fit (at least one into
        /// an empty builder), closing it if records remain: how many it moved.
        fn fill(&mut self, mut builder: PyRefMut<'_, PyRecordBatchBuilder>) -> usize {
            builder.fill_from(&mut self.queue)
        }

        /// The records not yet moved into a builder.
        fn __len__(&self) -> usize {
            self.queue.pending()
        }

        fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            let records = PyList::empty(py);
            for (timestamp, tail) in self.queue.iter() {
                let (key, value, headers) = read_tail(tail);
                let headers = PyList::new(
                    py,
                    headers.into_iter().map(|(name, value)| {
                        (
                            PyString::new(py, &String::from_utf8_lossy(name)),
                            value.map(|v| PyBytes::new(py, v)),
                        )
                    }),
                )?;
                let record = (
                    key.map(|k| PyBytes::new(py, k)),
                    value.map(|v| PyBytes::new(py, v)),
                    timestamp,
                    headers,
                );
                records.append(record)?;
            }
            records.try_iter().map(Bound::into_any)
        }
    }

    /// Changelog records of one partition (`(key, value)`, value None: a tombstone; no
    /// timestamp: the clock when it goes into a batch; no headers), each encoded once as it
    /// is queued, in order: `append`/`extend` from Python, `push` from Rust (the window
    /// store's writes, `store_writes`), `fill` moves the ones next in line into a
    /// `RecordBatchBuilder` (as `QueuedRecords`); iterating gives the ones left as
    /// `(key, value)` tuples, `len` their number.
    #[pyclass(module = "stores._native", name = "ChangelogRecords")]
    #[derive(Default)]
    pub struct PyChangelogRecords {
        queue: PartitionQueue,
    }

    impl PyChangelogRecords {
        /// Queue the record `key`, `value` (None: a tombstone).
        pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
            self.queue.push(None, |out| {
                put_tail(out, Some(key), value, std::iter::empty())
            });
        }

        fn push_object(&mut self, record: &Bound<'_, PyAny>) -> PyResult<()> {
            let (key, value): (PyBackedBytes, Option<PyBackedBytes>) = record.extract()?;
            self.push(&key, value.as_deref());
            Ok(())
        }
    }

    #[pymethods]
    impl PyChangelogRecords {
        /// `records`: `(key, value)` pairs. O(bytes).
        #[new]
        #[pyo3(signature = (records = None))]
        fn new(records: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
            let mut queued = PyChangelogRecords::default();
            if let Some(records) = records {
                queued.extend(records)?;
            }
            Ok(queued)
        }

        /// Queue one `(key, value)` record.
        fn append(&mut self, record: &Bound<'_, PyAny>) -> PyResult<()> {
            self.push_object(record)
        }

        /// Queue `(key, value)` records in order.
        fn extend(&mut self, records: &Bound<'_, PyAny>) -> PyResult<()> {
            for record in records.try_iter()? {
                self.push_object(&record?)?;
            }
            Ok(())
        }

        /// `QueuedRecords.fill`.
        fn fill(&mut self, mut builder: PyRefMut<'_, PyRecordBatchBuilder>) -> usize {
            builder.fill_from(&mut self.queue)
        }

        fn __len__(&self) -> usize {
            self.queue.pending()
        }

        fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            let records = PyList::empty(py);
            for (_, tail) in self.queue.iter() {
                let (key, value, _) = read_tail(tail);
                records.append((
                    key.map(|k| PyBytes::new(py, k)),
                    value.map(|v| PyBytes::new(py, v)),
                ))?;
            }
            records.try_iter().map(Bound::into_any)
        }
    }

    /// Keyed output records made in Rust (`KeyWindows.apply_fetched_events`' aggregate
    /// records), without a Python object each: per record its key's and value's bytes and its
    /// timestamp; a sequence of `(key, value, timestamp)` tuples (made when asked), which
    /// `OutputQueue.add_records` queues natively.
    #[pyclass(module = "stores._native", name = "KeyedRecords", frozen, sequence)]
    #[derive(Default)]
    pub struct PyKeyedRecords {
        bytes: Vec<u8>,
        /// Per record: where its key ends and where its value ends in `bytes`.
        ends: Vec<(usize, usize)>,
        timestamps: Vec<i64>,
    }

    impl PyKeyedRecords {
        /// Append the record `key`, `value` at `timestamp`.
        pub fn push(&mut self, key: &[u8], value: &[u8], timestamp: i64) {
            self.bytes.extend_from_slice(key);
            let key_end = self.bytes.len();
            self.bytes.extend_from_slice(value);
            self.ends.push((key_end, self.bytes.len()));
            self.timestamps.push(timestamp);
        }

        fn get(&self, i: usize) -> (&[u8], &[u8], i64) {
            let begin = if i == 0 { 0 } else { self.ends[i - 1].1 };
            let (key_end, end) = self.ends[i];
            (
                &self.bytes[begin..key_end],
                &self.bytes[key_end..end],
                self.timestamps[i],
            )
        }
    }

    #[pymethods]
    impl PyKeyedRecords {
        fn __len__(&self) -> usize {
            self.ends.len()
        }

        fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyTuple>> {
            let i = crate::py_sequence::item_index(i, self.ends.len(), "record")?;
            let (key, value, timestamp) = self.get(i);
            (PyBytes::new(py, key), PyBytes::new(py, value), timestamp).into_pyobject(py)
        }
    }

    /// Records of one topic queued per partition: a keyed record in its key's partition
    /// under Kafka's default partitioner (murmur2), one without a key in the partition given
    /// (modulo the count), in the order queued; `take` hands a partition's over. Timestamps
    /// go through `kafka_timestamp` (`agents.batched_send`'s).
    #[pyclass(module = "stores._native", name = "OutputQueue")]
    pub struct PyOutputQueue {
        queues: Vec<PartitionQueue>,
    }

    impl PyOutputQueue {
        fn target(&self, key: Option<&[u8]>, partition: i64) -> usize {
            let partitions = self.queues.len();
            match key {
                Some(key) => default_partition(key, partitions),
                None => partition.rem_euclid(partitions as i64) as usize,
            }
        }

        /// Queues one record without headers, its Kafka timestamp `kafka_timestamp(timestamp,
        /// now)`, and lowers `least` to that timestamp.
        fn push_plain(
            &mut self,
            key: Option<&[u8]>,
            value: Option<&[u8]>,
            timestamp: Option<i64>,
            now: i64,
            partition: i64,
            least: &mut Option<i64>,
        ) {
            let timestamp = kafka_timestamp(timestamp, now);
            if let Some(t) = timestamp {
                *least = Some(least.map_or(t, |l| l.min(t)));
            }
            let target = self.target(key, partition);
            self.queues[target].push(timestamp, |out| {
                put_tail(out, key, value, std::iter::empty())
            });
        }
    }

    #[pymethods]
    impl PyOutputQueue {
        /// An empty queue for a topic of `partitions` partitions.
        #[new]
        fn new(partitions: usize) -> PyResult<Self> {
            if partitions == 0 {
                return Err(PyValueError::new_err("a topic has at least one partition"));
            }
            let queues = (0..partitions).map(|_| PartitionQueue::default()).collect();
            Ok(PyOutputQueue { queues })
        }

        /// Queues one record: its Kafka timestamp (`kafka_timestamp(timestamp)`).
        #[pyo3(signature = (key, value, timestamp = None, headers = None, partition = 0))]
        fn add(
            &mut self,
            key: Option<PyBackedBytes>,
            value: Option<PyBackedBytes>,
            timestamp: Option<i64>,
            headers: Option<&Bound<'_, PyAny>>,
            partition: i64,
        ) -> PyResult<Option<i64>> {
            let headers = headers_of(headers)?;
            let timestamp = kafka_timestamp(timestamp, now_ms());
            let target = self.target(key.as_deref(), partition);
            self.queues[target].push(timestamp, |out| {
                write_tail(out, key.as_deref(), value.as_deref(), &headers)
            });
            Ok(timestamp)
        }

        /// Queues `keys[i], values[i], timestamps[i]` for every i (no headers), in order, in
        /// one call: the least Kafka timestamp among them (None if none has one).
        #[pyo3(signature = (keys, values, timestamps, partition = 0))]
        fn add_many(
            &mut self,
            keys: &Bound<'_, PyList>,
            values: &Bound<'_, PyList>,
            timestamps: &Bound<'_, PyList>,
            partition: i64,
        ) -> PyResult<Option<i64>> {
            let n = keys.len();
            if values.len() != n || timestamps.len() != n {
                return Err(PyValueError::new_err(
                    "keys, values and timestamps differ in length",
                ));
            }
            let now = now_ms();
            let mut least: Option<i64> = None;
            for i in 0..n {
                let key: Option<PyBackedBytes> = keys.get_item(i)?.extract()?;
                let value: Option<PyBackedBytes> = values.get_item(i)?.extract()?;
                let timestamp = timestamps.get_item(i)?.extract()?;
                let (key, value) = (key.as_deref(), value.as_deref());
                self.push_plain(key, value, timestamp, now, partition, &mut least);
            }
            Ok(least)
        }

        /// Queues the `(key, value, timestamp)` records of `records` (no headers), in order,
        /// as `add_many` would their lists, with no Python object per record: the least Kafka
        /// timestamp among them (None if there is none).
        fn add_records(&mut self, records: PyRef<'_, PyKeyedRecords>) -> Option<i64> {
            let now = now_ms();
            let mut least: Option<i64> = None;
            for i in 0..records.ends.len() {
                let (key, value, timestamp) = records.get(i);
                self.push_plain(Some(key), Some(value), Some(timestamp), now, 0, &mut least);
            }
            least
        }

        /// The partitions with records queued, ascending.
        fn partitions(&self) -> Vec<usize> {
            (0..self.queues.len())
                .filter(|&p| self.queues[p].pending() > 0)
                .collect()
        }

        /// The records queued for `partition`, which is left empty.
        fn take(&mut self, partition: usize) -> PyResult<PyQueuedRecords> {
            let queue = self
                .queues
                .get_mut(partition)
                .ok_or_else(|| PyValueError::new_err(format!("no partition {partition}")))?;
            Ok(PyQueuedRecords {
                queue: std::mem::take(queue),
            })
        }

        /// Records queued, all partitions.
        fn __len__(&self) -> usize {
            self.queues.iter().map(PartitionQueue::pending).sum()
        }
    }

    /// Kafka's murmur2 of `data`, as `aiokafka.partitioner.murmur2` gives it (unsigned).
    #[pyfunction]
    fn murmur2(data: &[u8]) -> u32 {
        super::murmur2(data) as u32
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<RecordMetadata>()?;
        m.add_class::<PyRecordBatchBuilder>()?;
        m.add_class::<PyQueuedRecords>()?;
        m.add_class::<PyChangelogRecords>()?;
        m.add_class::<PyOutputQueue>()?;
        m.add_class::<PyKeyedRecords>()?;
        m.add_function(wrap_pyfunction!(murmur2, m)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_of_the_standard_check_string() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_table(b"123456789"), 0xE306_9283);
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(crc32c(&long), crc32c_table(&long));
    }

    #[test]
    fn varints_are_zigzag() {
        for (value, bytes) in [
            (0i64, vec![0u8]),
            (-1, vec![1]),
            (1, vec![2]),
            (63, vec![126]),
            (64, vec![128, 1]),
            (-65, vec![129, 1]),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(out, bytes, "{value}");
            assert_eq!(varint_size(value), bytes.len());
        }
        assert_eq!(varint_size(i64::MIN), 10);
    }

    #[test]
    fn murmur2_as_kafka() {
        // values of the Java client's Utils.murmur2 (its tests and aiokafka's)
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn a_tail_reads_back_as_written() {
        let mut tail = Vec::new();
        let headers = [(&b"h"[..], Some(&b"1"[..])), (&b"g"[..], None)];
        put_tail(&mut tail, None, Some(&[7u8; 300]), headers.into_iter());
        let (key, value, read) = read_tail(&tail);
        assert_eq!((key, value), (None, Some(&[7u8; 300][..])));
        assert_eq!(read, headers.to_vec());
        let mut pos = 0;
        let mut out = Vec::new();
        put_varint(&mut out, i64::MIN);
        assert_eq!(read_varint(&out, &mut pos), i64::MIN);
    }

    #[test]
    fn a_full_batch_refuses_and_a_first_record_always_fits() {
        let mut batch = RecordBatch::new(HEADER_SIZE + 10, false);
        let tail = [0u8; 40];
        assert!(batch.append(5, &tail));
        assert!(!batch.append(6, &tail));
        assert_eq!(batch.records(), 1);
    }
}
