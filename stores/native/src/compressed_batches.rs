//! Compressed record batches of a Fetch response made plain, so that `fetched_records::decode`
//! reads input from producers that compress (a Java producer's `compression.type`) without
//! handing the response to aiokafka. `expand` rewrites each compressed v2 batch as the
//! uncompressed batch it stands for: the same header (base offset, epoch, offsets, times,
//! producer, sequence, count) with the codec bits cleared, the records decompressed, the
//! length and CRC-32C recomputed. Codecs as Kafka numbers them: gzip (1), snappy (2: raw, or
//! the xerial framing Java writes), lz4 (3: LZ4 frames) and zstd (4), all in pure Rust.
//! O(bytes decompressed); one copy of the response.

use crate::record_batch::crc32c;
use crate::state_codec::be_u32;
use std::io::Read;

const LOG_OVERHEAD: usize = 12;
const HEADER_SIZE: usize = 61;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const CODEC_BITS: u8 = 0x07;
const CONTROL_BIT: u8 = 0x20;
/// The xerial snappy stream's header: magic, then a version and a compatible version.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER: usize = 16;

/// `data` (a Fetch response's record bytes) with every compressed v2 batch rewritten
/// uncompressed, other batches copied as they are, a truncated last batch left out (as the
/// decoder leaves it for the next fetch). None when a batch is not v2, is a compressed control
/// batch, fails its CRC (with `check_crcs`), has an unknown codec or does not decompress: the
/// caller then hands the response to aiokafka, which decides as it does.
pub fn expand(data: &[u8], check_crcs: bool) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 4);
    let mut pos = 0;
    while data.len() - pos >= LOG_OVERHEAD {
        let length = be_u32(data, pos + 8).ok()? as usize;
        let end = pos + LOG_OVERHEAD + length;
        if end > data.len() {
            break;
        }
        let batch = &data[pos..end];
        pos = end;
        if batch.len() < HEADER_SIZE || batch[MAGIC_OFFSET] != 2 {
            return None;
        }
        let attributes = batch[ATTRIBUTES_OFFSET + 1];
        let codec = attributes & CODEC_BITS;
        if codec == 0 {
            out.extend_from_slice(batch);
            continue;
        }
        if attributes & CONTROL_BIT != 0 {
            return None;
        }
        if check_crcs && crc32c(&batch[ATTRIBUTES_OFFSET..]) != be_u32(batch, CRC_OFFSET).ok()? {
            return None;
        }
        let records = decompress(codec, &batch[HEADER_SIZE..])?;
        let start = out.len();
        out.extend_from_slice(&batch[..HEADER_SIZE]);
        out.extend_from_slice(&records);
        let new_length = u32::try_from(out.len() - start - LOG_OVERHEAD).ok()?;
        out[start + 8..start + 12].copy_from_slice(&new_length.to_be_bytes());
        out[start + ATTRIBUTES_OFFSET + 1] &= !CODEC_BITS;
        let crc = crc32c(&out[start + ATTRIBUTES_OFFSET..]);
        out[start + CRC_OFFSET..start + CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
    Some(out)
}

/// The records section `payload` of a batch compressed with Kafka codec `codec`, inflated.
fn decompress(codec: u8, payload: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(payload.len() * 4);
    match codec {
        1 => {
            flate2::read::MultiGzDecoder::new(payload)
                .read_to_end(&mut out)
                .ok()?;
        }
        2 => snappy(payload, &mut out)?,
        3 => {
            lz4_flex::frame::FrameDecoder::new(payload)
                .read_to_end(&mut out)
                .ok()?;
        }
        4 => {
            ruzstd::StreamingDecoder::new(payload)
                .ok()?
                .read_to_end(&mut out)
                .ok()?;
        }
        _ => return None,
    }
    Some(out)
}

/// Snappy as Kafka clients write it: the xerial framing (a header, then blocks each preceded
/// by its big-endian length) when the header is there, else one raw block.
fn snappy(payload: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let mut decoder = snap::raw::Decoder::new();
    if payload.len() < XERIAL_HEADER || payload[..8] != XERIAL_MAGIC {
        out.extend_from_slice(&decoder.decompress_vec(payload).ok()?);
        return Some(());
    }
    let mut pos = XERIAL_HEADER;
    while pos < payload.len() {
        let size = be_u32(payload, pos).ok()? as usize;
        let block = payload.get(pos + 4..pos + 4 + size)?;
        out.extend_from_slice(&decoder.decompress_vec(block).ok()?);
        pos += 4 + size;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xerial_blocks_and_a_raw_block_give_the_same_bytes() {
        let plain: Vec<u8> = (0..5000u32).flat_map(|i| (i % 251).to_be_bytes()).collect();
        let mut encoder = snap::raw::Encoder::new();
        let raw = encoder.compress_vec(&plain).unwrap();
        let mut out = Vec::new();
        snappy(&raw, &mut out).unwrap();
        assert_eq!(out, plain);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for part in plain.chunks(7000) {
            let block = encoder.compress_vec(part).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        let mut out = Vec::new();
        snappy(&framed, &mut out).unwrap();
        assert_eq!(out, plain);
    }

    #[test]
    fn an_unknown_codec_or_corrupt_data_decides_nothing() {
        assert!(decompress(5, b"abc").is_none());
        assert!(decompress(3, b"not an lz4 frame").is_none());
        assert!(decompress(1, b"not gzip").is_none());
    }
}
