//! LZ4 frames (the format of Kafka's `Lz4BlockOutputStream`) decoded by safe Rust.
//!
//! What this reads: one frame with independent blocks, optional block and content checksums
//! and content size, nothing after its end mark. Anything else (linked blocks, dictionaries,
//! skippable frames, bad checksums) returns None and the caller falls back to the reference
//! codec, which decodes it or names the error. So does a frame that unpacks to more than the
//! caller's `max_bytes` (a compression bomb): decoding stops at the bound, having held at most
//! `max_bytes` plus one block, and the reference names the error.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use xxhash_rust::xxh32::xxh32;

use crate::buffers::Borrowed;

const MAGIC: u32 = 0x184D_2204;

/// The bound when the caller gives none: 2 GiB - 1, as `compression.DECOMPRESSED_MAX_BYTES`
/// (Java's largest array; Arrow's int32 offsets).
pub const READ_MAX_BYTES: usize = i32::MAX as usize;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The frame's content, or None for anything this reader does not accept (more than
/// `max_bytes` included).
pub fn decompress(input: &[u8], max_bytes: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    decompress_into(input, &mut out, max_bytes).then_some(out)
}

/// `decompress` into `out` (cleared first, its capacity reused); false where it returns None.
pub fn decompress_into(input: &[u8], out: &mut Vec<u8>, max_bytes: usize) -> bool {
    out.clear();
    frame_into(input, out, max_bytes).is_some()
}

fn frame_into(input: &[u8], out: &mut Vec<u8>, max_bytes: usize) -> Option<()> {
    if u32_at(input, 0)? != MAGIC {
        return None;
    }
    let flg = *input.get(4)?;
    let bd = *input.get(5)?;
    let (independent, block_sum, has_size, content_sum) =
        (flg & 0x20 != 0, flg & 0x10 != 0, flg & 0x08 != 0, flg & 0x04 != 0);
    if flg >> 6 != 1 || flg & 0x03 != 0 || !independent || bd & 0x8F != 0 {
        return None;
    }
    let max_block = match (bd >> 4) & 7 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return None,
    };
    let desc_end = 6 + if has_size { 8 } else { 0 };
    let descriptor = input.get(4..desc_end)?;
    if (xxh32(descriptor, 0) >> 8) as u8 != *input.get(desc_end)? {
        return None;
    }
    let size = if has_size {
        Some(u64::from_le_bytes(input.get(6..14)?.try_into().ok()?))
    } else {
        None
    };
    if size.is_some_and(|s| s > max_bytes as u64) {
        return None; // an honest bomb says so in its descriptor
    }
    let mut pos = desc_end + 1;
    loop {
        let word = u32_at(input, pos)?;
        pos += 4;
        if word == 0 {
            break;
        }
        let len = (word & 0x7FFF_FFFF) as usize;
        if len == 0 || len > max_block {
            return None;
        }
        let block = input.get(pos..pos + len)?;
        pos += len;
        if block_sum {
            if u32_at(input, pos)? != xxh32(block, 0) {
                return None;
            }
            pos += 4;
        }
        let at = out.len();
        let room = max_block.min(max_bytes - at); // out.len() <= max_bytes holds throughout
        if word & 0x8000_0000 != 0 {
            if len > room {
                return None;
            }
            out.extend_from_slice(block);
        } else {
            if out.capacity() < at + room {
                let want = (at + max_block.max(4 * input.len())).min(max_bytes).max(at + room);
                out.reserve(want - at);
            }
            out.resize(at + room, 0); // the block's room, zero-filled while in cache
            // A block that needs more room than is left fails here: None, past the bound.
            let n = lz4_flex::block::decompress_into(block, &mut out[at..]).ok()?;
            out.truncate(at + n);
        }
    }
    if content_sum {
        if u32_at(input, pos)? != xxh32(out, 0) {
            return None;
        }
        pos += 4;
    }
    (pos == input.len() && size.is_none_or(|s| s == out.len() as u64)).then_some(())
}

/// `decompress` for Python (the broker's record walk, tests and fuzzing): bytes, or None where
/// the reference decides (also past `max_bytes`). `data` is bytes or any contiguous buffer (a
/// memoryview slice).
#[pyfunction]
#[pyo3(signature = (data, max_bytes = READ_MAX_BYTES))]
pub fn lz4_frame_decompress<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    max_bytes: usize,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let out = match data.cast::<PyBytes>() {
        Ok(b) => decompress(b.as_bytes(), max_bytes),
        Err(_) => decompress(Borrowed::new(data)?.bytes(py), max_bytes),
    };
    Ok(out.map(|v| PyBytes::new(py, &v)))
}

const BLOCK: usize = 64 << 10;

/// Append `data` as one LZ4 frame to `out`: FLG version 1 with independent blocks, 64 KiB
/// blocks, no checksums or size (what `compression.compress` writes); a block that does not
/// shrink is stored raw, as liblz4 does.
pub fn compress_into(data: &[u8], out: &mut Vec<u8>) {
    let descriptor = [0x60u8, 0x40];
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&descriptor);
    out.push((xxh32(&descriptor, 0) >> 8) as u8);
    for block in data.chunks(BLOCK) {
        let at = out.len();
        out.resize(at + 4 + lz4_flex::block::get_maximum_output_size(block.len()), 0);
        let n = lz4_flex::block::compress_into(block, &mut out[at + 4..])
            .expect("the output has the maximum compressed size");
        if n < block.len() {
            out[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
            out.truncate(at + 4 + n);
        } else {
            out[at..at + 4].copy_from_slice(&(block.len() as u32 | 0x8000_0000).to_le_bytes());
            out.truncate(at + 4);
            out.extend_from_slice(block);
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes());
}
