//! Kafka's murmur2 (`Utils.murmur2`, seed 0x9747b28c) over many keys of one Arrow buffer.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{i64s, Borrowed};

const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;

/// murmur2 of one key, as Java's signed int bits.
pub fn murmur2(data: &[u8]) -> u32 {
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes(c.try_into().unwrap());
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        // Java's switch falls through case 3 -> 2 -> 1: the tail bytes little-endian.
        let mut k = 0u32;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        h = (h ^ k).wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// int32 little-endian hashes of data[starts[i] .. starts[i] + lengths[i]] (int64 inputs).
#[pyfunction]
pub fn murmur2_hashes<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    starts: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let data = Borrowed::new(data)?;
    let bytes = data.bytes(py);
    let starts = i64s(Borrowed::new(starts)?.bytes(py));
    let lengths = i64s(Borrowed::new(lengths)?.bytes(py));
    let mut out = Vec::with_capacity(4 * starts.len());
    for (s, l) in starts.into_iter().zip(lengths) {
        let key = usize::try_from(s)
            .ok()
            .zip(usize::try_from(l).ok())
            .and_then(|(s, l)| bytes.get(s..s.checked_add(l)?))
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("key outside its buffer"))?;
        out.extend_from_slice(&murmur2(key).to_le_bytes());
    }
    Ok(PyBytes::new(py, &out))
}

#[cfg(test)]
mod tests {
    #[test]
    fn kafka_vectors() {
        // Kafka's UtilsTest.testMurmur2
        assert_eq!(super::murmur2(b"21") as i32, -973932308);
        assert_eq!(super::murmur2(b"abc") as i32, 479470107);
        assert_eq!(super::murmur2(b"foobar") as i32, -790332482);
    }
}
