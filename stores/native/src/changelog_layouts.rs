//! Issue 29 item 2's measurement (`python -m bench.changelog_chunks --native`): the window
//! store's changelog as today's per-entry records against one record per key per batch, both
//! encoded natively into Kafka v2 record batches (varints, CRC32C), on the worker benchmark's
//! shape (keys, entries retained per key, batches of events spread over the keys, each insert
//! evicting the key's oldest entry). Chunks are bounded under compaction by a snapshot of the
//! key's retained entries whenever its live chunks exceed `factor` times them (older chunks
//! then tombstoned). Also replays each compacted log into `state_codec::Entries`. A model of
//! the encoders' work (partials are copied, not encoded from a FiBA), not the product.

use crate::state_codec::Entries;
use std::collections::VecDeque;
use std::time::Instant;

const PARTIAL: usize = 25; // marshal of (float, int, float)
const BIAS: u64 = 1 << 63;

fn put_varint(buf: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// CRC32C (Castagnoli): the SSE 4.2 instruction where there is one (as Kafka's clients use),
/// else a bytewise table.
fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE 4.2 (checked just above)
            return unsafe { crc32c_sse42(data) };
        }
    }
    crc32c_table(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut crc = u64::from(!0u32);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w.try_into().unwrap()));
    }
    let mut crc = crc as u32;
    for &b in words.remainder() {
        crc = _mm_crc32_u8(crc, b);
    }
    !crc
}

fn crc32c_table(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0x82F6_3B78 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    });
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// One Kafka v2 record batch being written.
struct BatchWriter {
    buf: Vec<u8>,
    body: Vec<u8>,
    count: i32,
}

impl BatchWriter {
    fn new() -> Self {
        let mut buf = Vec::with_capacity(1 << 20);
        buf.resize(61, 0);
        BatchWriter {
            buf,
            body: Vec::with_capacity(256),
            count: 0,
        }
    }

    fn append(&mut self, key: &[u8], value: Option<&[u8]>) {
        let body = &mut self.body;
        body.clear();
        body.push(0); // attributes
        put_varint(body, 0); // timestamp delta
        put_varint(body, i64::from(self.count)); // offset delta
        put_varint(body, key.len() as i64);
        body.extend_from_slice(key);
        match value {
            Some(v) => {
                put_varint(body, v.len() as i64);
                body.extend_from_slice(v);
            }
            None => put_varint(body, -1),
        }
        put_varint(body, 0); // headers
        put_varint(&mut self.buf, body.len() as i64);
        self.buf.extend_from_slice(body);
        self.count += 1;
    }

    /// The finished batch (header and CRC written); the writer is reset.
    fn finish(&mut self, base_offset: i64) -> Vec<u8> {
        let mut out = std::mem::replace(&mut self.buf, {
            let mut b = Vec::with_capacity(1 << 20);
            b.resize(61, 0);
            b
        });
        let length = (out.len() - 12) as i32;
        out[0..8].copy_from_slice(&base_offset.to_be_bytes());
        out[8..12].copy_from_slice(&length.to_be_bytes());
        out[16] = 2; // magic
        out[23..27].copy_from_slice(&(self.count - 1).to_be_bytes());
        out[43..51].copy_from_slice(&(-1i64).to_be_bytes());
        out[51..53].copy_from_slice(&(-1i16).to_be_bytes());
        out[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        out[57..61].copy_from_slice(&self.count.to_be_bytes());
        let crc = crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        self.count = 0;
        out
    }
}

fn prefix(key: usize) -> Vec<u8> {
    let name = format!("key-{key}");
    let mut p = (name.len() as u32).to_be_bytes().to_vec();
    p.extend_from_slice(name.as_bytes());
    p
}

fn eid(prefix: &[u8], time: i64) -> Vec<u8> {
    let mut e = prefix.to_vec();
    e.extend_from_slice(&((time as u64) ^ BIAS).to_be_bytes());
    e
}

fn partial(seed: i64) -> [u8; PARTIAL] {
    let mut p = [0u8; PARTIAL];
    p[0] = b')';
    p[1] = 3;
    p[2] = b'g';
    p[3..11].copy_from_slice(&(seed as f64 * 0.5).to_le_bytes());
    p[11] = b'i';
    p[12..16].copy_from_slice(&(seed as i32).to_le_bytes());
    p[16] = b'g';
    p[17..25].copy_from_slice(&(seed as f64).to_le_bytes());
    p
}

/// What one layout cost: per event the encode time, records and bytes; the compacted log's
/// bytes and its replay time per retained entry.
#[derive(Debug, Default, Clone, Copy)]
pub struct LayoutCosts {
    pub encode_ns_per_event: f64,
    pub records_per_event: f64,
    pub bytes_per_event: f64,
    pub compacted_bytes_per_entry: f64,
    pub replay_ns_per_entry: f64,
}

/// Today's layout: per event one upsert (its evicted time inside) and one tombstone.
pub fn per_entry(
    keys: usize,
    occupancy: usize,
    batches: usize,
    batch_events: usize,
) -> LayoutCosts {
    let prefixes: Vec<Vec<u8>> = (0..keys).map(prefix).collect();
    let mut next: Vec<i64> = vec![occupancy as i64; keys];
    let mut writer = BatchWriter::new();
    let (mut records, mut bytes, mut offset) = (0usize, 0usize, 0i64);
    let mut value = Vec::with_capacity(64);
    let start = Instant::now();
    for _ in 0..batches {
        for j in 0..batch_events {
            let k = j % keys;
            let t = next[k];
            next[k] += 1;
            let old = t - occupancy as i64;
            value.clear();
            value.extend_from_slice(&offset.to_be_bytes());
            value.extend_from_slice(&1u32.to_be_bytes());
            value.extend_from_slice(&((old as u64) ^ BIAS).to_be_bytes());
            value.extend_from_slice(&partial(t));
            writer.append(&eid(&prefixes[k], t), Some(&value));
            writer.append(&eid(&prefixes[k], old), None);
            records += 2;
            offset += 1;
        }
        bytes += writer.finish(offset).len();
    }
    let encode = start.elapsed().as_secs_f64();
    // the compacted log: one upsert per retained entry
    let mut log = BatchWriter::new();
    for (k, p) in prefixes.iter().enumerate() {
        for t in next[k] - occupancy as i64..next[k] {
            value.clear();
            value.extend_from_slice(&0i64.to_be_bytes());
            value.extend_from_slice(&0u32.to_be_bytes());
            value.extend_from_slice(&partial(t));
            log.append(&eid(p, t), Some(&value));
        }
    }
    let compacted = log.finish(0);
    let start = Instant::now();
    let mut entries = Entries::default();
    entries.replay_batch(&compacted, 0, -1).expect("own batch");
    let replay = start.elapsed().as_secs_f64();
    assert_eq!(entries.len(), keys * occupancy);
    let events = (batches * batch_events) as f64;
    LayoutCosts {
        encode_ns_per_event: encode * 1e9 / events,
        records_per_event: records as f64 / events,
        bytes_per_event: bytes as f64 / events,
        compacted_bytes_per_entry: compacted.len() as f64 / (keys * occupancy) as f64,
        replay_ns_per_entry: replay * 1e9 / (keys * occupancy) as f64,
    }
}

/// Per key one chunk record per batch (its new entries and evicted times), and a snapshot of the
/// key's retained entries once its live chunks exceed `factor` times them, the older chunks
/// then tombstoned.
pub fn chunks(
    keys: usize,
    occupancy: usize,
    batches: usize,
    batch_events: usize,
    factor: f64,
) -> LayoutCosts {
    let prefixes: Vec<Vec<u8>> = (0..keys).map(prefix).collect();
    let mut retained: Vec<VecDeque<(i64, [u8; PARTIAL])>> = (0..keys)
        .map(|_| (0..occupancy as i64).map(|t| (t, partial(t))).collect())
        .collect();
    let entry_bytes = 8 + 4 + PARTIAL;
    let retained_bytes = (occupancy * entry_bytes) as f64;
    let mut live: Vec<f64> = vec![retained_bytes; keys]; // a snapshot to start from
    let mut live_chunks: Vec<Vec<u64>> = vec![vec![0]; keys];
    let mut seq: Vec<u64> = vec![1; keys];
    let mut writer = BatchWriter::new();
    let (mut records, mut bytes, mut offset) = (0usize, 0usize, 0i64);
    let mut puts: Vec<Vec<(i64, [u8; PARTIAL])>> = vec![Vec::new(); keys];
    let mut dels: Vec<Vec<i64>> = vec![Vec::new(); keys];
    let mut value = Vec::with_capacity(1 << 16);
    let start = Instant::now();
    for _ in 0..batches {
        for j in 0..batch_events {
            let k = j % keys;
            let t = retained[k].back().map_or(0, |e| e.0 + 1);
            let p = partial(t);
            retained[k].push_back((t, p));
            let (old, _) = retained[k].pop_front().unwrap();
            puts[k].push((t, p));
            dels[k].push(old);
            offset += 1;
        }
        for k in 0..keys {
            if puts[k].is_empty() {
                continue;
            }
            value.clear();
            value.extend_from_slice(&offset.to_be_bytes());
            value.extend_from_slice(&(puts[k].len() as u32).to_be_bytes());
            value.extend_from_slice(&(dels[k].len() as u32).to_be_bytes());
            for (t, p) in puts[k].drain(..) {
                value.extend_from_slice(&((t as u64) ^ BIAS).to_be_bytes());
                value.extend_from_slice(&(PARTIAL as u32).to_be_bytes());
                value.extend_from_slice(&p);
            }
            for t in dels[k].drain(..) {
                value.extend_from_slice(&((t as u64) ^ BIAS).to_be_bytes());
            }
            let mut key = prefixes[k].clone();
            key.extend_from_slice(&seq[k].to_be_bytes());
            writer.append(&key, Some(&value));
            records += 1;
            live[k] += value.len() as f64;
            live_chunks[k].push(seq[k]);
            seq[k] += 1;
            if live[k] > factor * retained_bytes {
                value.clear();
                value.extend_from_slice(&offset.to_be_bytes());
                value.extend_from_slice(&(retained[k].len() as u32).to_be_bytes());
                value.extend_from_slice(&0u32.to_be_bytes());
                for (t, p) in &retained[k] {
                    value.extend_from_slice(&((*t as u64) ^ BIAS).to_be_bytes());
                    value.extend_from_slice(&(PARTIAL as u32).to_be_bytes());
                    value.extend_from_slice(p);
                }
                let mut key = prefixes[k].clone();
                key.extend_from_slice(&seq[k].to_be_bytes());
                writer.append(&key, Some(&value));
                for old in live_chunks[k].drain(..) {
                    let mut key = prefixes[k].clone();
                    key.extend_from_slice(&old.to_be_bytes());
                    writer.append(&key, None);
                    records += 1;
                }
                records += 1;
                live[k] = value.len() as f64;
                live_chunks[k].push(seq[k]);
                seq[k] += 1;
            }
        }
        bytes += writer.finish(offset).len();
    }
    let encode = start.elapsed().as_secs_f64();
    // the compacted log's size: per key its live chunks (the snapshot among them), each with
    // its key and about 10 bytes of record framing
    let framing = (prefixes[0].len() + 8 + 10) as f64;
    let compacted: f64 = live.iter().sum::<f64>()
        + live_chunks
            .iter()
            .map(|c| c.len() as f64 * framing)
            .sum::<f64>();
    // its replay: the retained entries as one snapshot per key plus one batch's chunk each,
    // decoded into the entries (a lower bound: the chunks a key's live log holds beyond that)
    let mut log = Vec::new();
    for (k, p) in prefixes.iter().enumerate() {
        let mut v = Vec::new();
        v.extend_from_slice(&(retained[k].len() as u32).to_be_bytes());
        for (t, part) in &retained[k] {
            v.extend_from_slice(&((*t as u64) ^ BIAS).to_be_bytes());
            v.extend_from_slice(&(PARTIAL as u32).to_be_bytes());
            v.extend_from_slice(part);
        }
        log.push((p.clone(), v));
    }
    let start = Instant::now();
    let mut entries = Entries::default();
    for (p, v) in &log {
        let n = u32::from_be_bytes(v[0..4].try_into().unwrap()) as usize;
        let mut at = 4;
        let mut id = p.clone();
        for _ in 0..n {
            id.truncate(p.len());
            id.extend_from_slice(&v[at..at + 8]);
            let len = u32::from_be_bytes(v[at + 8..at + 12].try_into().unwrap()) as usize;
            entries.put(&id, &v[at + 12..at + 12 + len]);
            at += 12 + len;
        }
    }
    let replay = start.elapsed().as_secs_f64();
    assert_eq!(entries.len(), keys * occupancy);
    let events = (batches * batch_events) as f64;
    LayoutCosts {
        encode_ns_per_event: encode * 1e9 / events,
        records_per_event: records as f64 / events,
        bytes_per_event: bytes as f64 / events,
        compacted_bytes_per_entry: compacted / (keys * occupancy) as f64,
        replay_ns_per_entry: replay * 1e9 / (keys * occupancy) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_of_the_standard_check_string() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(
            crc32c_table(b"123456789abcdefgh"),
            crc32c(b"123456789abcdefgh")
        );
    }

    #[test]
    fn per_entry_batches_replay_and_chunks_stay_bounded() {
        let a = per_entry(4, 10, 3, 40);
        assert_eq!(a.records_per_event, 2.0);
        let b = chunks(4, 10, 30, 40, 2.0);
        assert!(b.records_per_event < 1.0);
        // bounded by the factor: at most 2x the retained entries' bytes, plus framing
        assert!(b.compacted_bytes_per_entry <= 2.0 * 37.0 + 30.0);
    }
}

#[cfg(feature = "python")]
pub mod python {
    //! `stores._native.bench_changelog_layouts`.
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    /// `{"per_entry": {...}, "chunks": {...}}`: each layout's `LayoutCosts` as a dict.
    #[pyfunction]
    #[pyo3(signature = (keys, occupancy, batches, batch_events, factor))]
    fn bench_changelog_layouts<'py>(
        py: Python<'py>,
        keys: usize,
        occupancy: usize,
        batches: usize,
        batch_events: usize,
        factor: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (a, b) = py.allow_threads(|| {
            (
                super::per_entry(keys, occupancy, batches, batch_events),
                super::chunks(keys, occupancy, batches, batch_events, factor),
            )
        });
        let out = PyDict::new(py);
        for (name, c) in [("per_entry", a), ("chunks", b)] {
            let d = PyDict::new(py);
            d.set_item("encode_ns_per_event", c.encode_ns_per_event)?;
            d.set_item("records_per_event", c.records_per_event)?;
            d.set_item("bytes_per_event", c.bytes_per_event)?;
            d.set_item("compacted_bytes_per_entry", c.compacted_bytes_per_entry)?;
            d.set_item("replay_ns_per_entry", c.replay_ns_per_entry)?;
            out.set_item(name, d)?;
        }
        Ok(out)
    }

    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_function(wrap_pyfunction!(bench_changelog_layouts, m)?)
    }
}
