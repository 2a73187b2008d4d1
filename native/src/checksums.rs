//! CRC-32C (hardware instructions through the `crc32c` crate) over batches.

use pyo3::prelude::*;

use crate::buffers::{i64s, Borrowed};

/// CRC-32C of `data` (any contiguous buffer), continuing from `value`.
#[pyfunction]
#[pyo3(signature = (data, value = 0))]
pub fn crc32c(py: Python<'_>, data: &Bound<'_, PyAny>, value: u32) -> PyResult<u32> {
    Ok(::crc32c::crc32c_append(value, Borrowed::new(data)?.bytes(py)))
}

/// Index of the first batch whose stored CRC (bytes 17..21) does not match bytes 21..end,
/// or -1. `positions` and `sizes` are int64 little-endian.
#[pyfunction]
pub fn first_bad_crc(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    positions: &[u8],
    sizes: &[u8],
) -> PyResult<i64> {
    let buf = Borrowed::new(buf)?;
    let buf = buf.bytes(py);
    for (i, (p, s)) in i64s(positions).into_iter().zip(i64s(sizes)).enumerate() {
        let (p, s) = (p as usize, s as usize);
        let batch = match buf.get(p..p.saturating_add(s)) {
            Some(b) if b.len() >= 21 => b,
            _ => return Ok(i as i64),
        };
        let stored = u32::from_be_bytes(batch[17..21].try_into().unwrap());
        if ::crc32c::crc32c(&batch[21..]) != stored {
            return Ok(i as i64);
        }
    }
    Ok(-1)
}
