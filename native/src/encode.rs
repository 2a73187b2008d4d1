//! Arrow buffers -> v2 record batches (the producer's and the DataFrame writer's hot path).
//!
//! `encode_records` writes records sections byte for byte as `arrow_encode` does in numpy;
//! `encode_batches` writes whole batches (header, records, CRC-32C), LZ4-framed when asked, so
//! a batch's bytes are written once, in place.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{i64s, Borrowed};
use crate::lz4frame;
use crate::varint::{put, size_of};

pub(crate) const HEADER_SIZE: usize = 61;
const CRC_START: usize = 21;
const INT32_MAX: i64 = 0x7FFF_FFFF;

type ColumnParts<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>);
type HeaderParts<'py> = (Bound<'py, PyAny>, ColumnParts<'py>);

/// A column's bytes: `data[starts[i] .. starts[i] + lengths[i]]`, length -1 for null.
struct Column {
    data: Borrowed,
    starts: Vec<i64>,
    lengths: Vec<i64>,
}

impl Column {
    fn new(parts: &ColumnParts<'_>, n: usize, py: Python<'_>) -> PyResult<Self> {
        let data = Borrowed::new(&parts.0)?;
        let starts = i64s(Borrowed::new(&parts.1)?.bytes(py));
        let lengths = i64s(Borrowed::new(&parts.2)?.bytes(py));
        if starts.len() != n || lengths.len() != n {
            return Err(PyValueError::new_err("column starts and lengths need one entry per record"));
        }
        let size = data.bytes(py).len() as i64;
        for (s, l) in starts.iter().zip(&lengths) {
            if *l < -1 || (*l > 0 && (*s < 0 || s.checked_add(*l).is_none_or(|e| e > size))) {
                return Err(PyValueError::new_err("a value lies outside its column's data"));
            }
        }
        Ok(Column { data, starts, lengths })
    }

    #[inline]
    fn bytes<'a>(&'a self, data: &'a [u8], i: usize) -> &'a [u8] {
        let l = self.lengths[i];
        if l <= 0 {
            return &[];
        }
        let s = self.starts[i] as usize;
        &data[s..s + l as usize]
    }
}

/// The records to write: per-record columns of one work group.
struct Rows<'py> {
    py: Python<'py>,
    value: Column,
    key: Option<Column>,
    header_count: Option<Vec<i64>>,
    header_blobs: Option<Column>,
}

impl<'py> Rows<'py> {
    fn new(
        py: Python<'py>,
        n: usize,
        value: &ColumnParts<'py>,
        key: &Option<ColumnParts<'py>>,
        headers: &Option<HeaderParts<'py>>,
    ) -> PyResult<Self> {
        let value = Column::new(value, n, py)?;
        let key = key.as_ref().map(|k| Column::new(k, n, py)).transpose()?;
        let (header_count, header_blobs) = match headers {
            Some((c, b)) => {
                let count = i64s(Borrowed::new(c)?.bytes(py));
                if count.len() != n || count.iter().any(|&c| c < 0) {
                    return Err(PyValueError::new_err("one header count (>= 0) per record"));
                }
                (Some(count), Some(Column::new(b, n, py)?))
            }
            None => (None, None),
        };
        Ok(Rows { py, value, key, header_count, header_blobs })
    }

    #[inline]
    fn key_len(&self, i: usize) -> i64 {
        self.key.as_ref().map_or(-1, |k| k.lengths[i])
    }

    /// The record's body size (attributes .. headers) with these deltas.
    #[inline]
    fn body(&self, i: usize, ts_delta: i64, offset_delta: i64) -> usize {
        let (k, v) = (self.key_len(i), self.value.lengths[i]);
        let mut body = 1 + size_of(ts_delta) + size_of(offset_delta) + size_of(k) + size_of(v);
        body += k.max(0) as usize + v.max(0) as usize;
        body + match (&self.header_count, &self.header_blobs) {
            (Some(c), Some(b)) => size_of(c[i]) + b.lengths[i].max(0) as usize,
            _ => 1,
        }
    }

    /// Write record i (its length varint first) at `out[at..]`; returns the end.
    fn write(&self, out: &mut [u8], at: usize, i: usize, body: usize, ts: i64, off: i64) -> usize {
        let value_data = self.value.data.bytes(self.py);
        let mut at = put(out, at, body as i64);
        out[at] = 0; // attributes
        at = put(out, at + 1, ts);
        at = put(out, at, off);
        let mut field = |at: usize, len: i64, bytes: &[u8]| {
            let at = put(out, at, len);
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at + bytes.len()
        };
        at = match &self.key {
            Some(k) => field(at, k.lengths[i], k.bytes(k.data.bytes(self.py), i)),
            None => field(at, -1, &[]),
        };
        at = field(at, self.value.lengths[i], self.value.bytes(value_data, i));
        match (&self.header_count, &self.header_blobs) {
            (Some(c), Some(b)) => {
                let at = put(out, at, c[i]);
                let blob = b.bytes(b.data.bytes(self.py), i);
                out[at..at + blob.len()].copy_from_slice(blob);
                at + blob.len()
            }
            _ => put(out, at, 0),
        }
    }
}

/// Records back to back, with offset and timestamp deltas given per record: (bytes, int64 LE
/// end of each record). `key` and `headers` are optional (no key: every key null; no
/// headers: every count 0); `headers` is (count per record, encoded entries as a column).
/// A column is (data buffer, int64 starts, int64 lengths with -1 for null), as bytes.
#[pyfunction]
#[pyo3(signature = (ts_delta, offset_delta, value, key = None, headers = None))]
pub fn encode_records<'py>(
    py: Python<'py>,
    ts_delta: &Bound<'py, PyAny>,
    offset_delta: &Bound<'py, PyAny>,
    value: ColumnParts<'py>,
    key: Option<ColumnParts<'py>>,
    headers: Option<HeaderParts<'py>>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let ts = i64s(Borrowed::new(ts_delta)?.bytes(py));
    let off = i64s(Borrowed::new(offset_delta)?.bytes(py));
    let n = ts.len();
    if off.len() != n {
        return Err(PyValueError::new_err("one offset delta per timestamp delta"));
    }
    let rows = Rows::new(py, n, &value, &key, &headers)?;
    let mut bodies = Vec::with_capacity(n);
    let mut ends = Vec::with_capacity(8 * n);
    let mut total = 0usize;
    for i in 0..n {
        let body = rows.body(i, ts[i], off[i]);
        total += size_of(body as i64) + body;
        bodies.push(body);
        ends.extend_from_slice(&(total as i64).to_le_bytes());
    }
    let data = PyBytes::new_with(py, total, |out: &mut [u8]| {
        let mut at = 0;
        for i in 0..n {
            at = rows.write(out, at, i, bodies[i], ts[i], off[i]);
        }
        Ok(())
    })?;
    Ok((data, PyBytes::new(py, &ends)))
}

/// The batch header fields every batch of a call shares.
#[derive(Clone, Copy)]
pub(crate) struct Fixed {
    pub attributes: i16,
    pub partition_leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

pub(crate) fn write_header(h: &mut [u8], fixed: Fixed, size: usize, count: usize, ts: (i64, i64), seq: i32) {
    h[0..8].copy_from_slice(&0i64.to_be_bytes());
    h[8..12].copy_from_slice(&((size - 12) as i32).to_be_bytes());
    h[12..16].copy_from_slice(&fixed.partition_leader_epoch.to_be_bytes());
    h[16] = 2; // magic
    h[21..23].copy_from_slice(&fixed.attributes.to_be_bytes());
    h[23..27].copy_from_slice(&((count - 1) as i32).to_be_bytes());
    h[27..35].copy_from_slice(&ts.0.to_be_bytes());
    h[35..43].copy_from_slice(&ts.1.to_be_bytes());
    h[43..51].copy_from_slice(&fixed.producer_id.to_be_bytes());
    h[51..53].copy_from_slice(&fixed.producer_epoch.to_be_bytes());
    h[53..57].copy_from_slice(&seq.to_be_bytes());
    h[57..61].copy_from_slice(&(count as i32).to_be_bytes());
}

pub(crate) fn seal(batch: &mut [u8]) {
    let crc = ::crc32c::crc32c(&batch[CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Whole v2 batches (base offset 0) of the records `ts` (absolute timestamps) and the columns
/// describe, batch j holding records starts[j]..starts[j+1]. `first_sequence` is the sequence
/// of record 0 (or -1: none); `log_append_ms` makes every maxTimestamp that time; `lz4` frames
/// each records section as Kafka's LZ4 codec does (independent 64 KiB blocks).
#[pyfunction]
#[pyo3(signature = (
    ts, starts, value, key, headers, attributes, partition_leader_epoch, producer_id,
    producer_epoch, first_sequence, log_append_ms, lz4
))]
#[allow(clippy::too_many_arguments)]
pub fn encode_batches<'py>(
    py: Python<'py>,
    ts: &Bound<'py, PyAny>,
    starts: &Bound<'py, PyAny>,
    value: ColumnParts<'py>,
    key: Option<ColumnParts<'py>>,
    headers: Option<HeaderParts<'py>>,
    attributes: i16,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    first_sequence: i64,
    log_append_ms: Option<i64>,
    lz4: bool,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let ts = i64s(Borrowed::new(ts)?.bytes(py));
    let starts = i64s(Borrowed::new(starts)?.bytes(py));
    let n = ts.len();
    let bad_starts = starts.first() != Some(&0)
        || starts.last() != Some(&(n as i64))
        || starts.windows(2).any(|w| w[1] <= w[0]);
    if bad_starts {
        return Err(PyValueError::new_err("batch starts must rise from 0 to the record count"));
    }
    let rows = Rows::new(py, n, &value, &key, &headers)?;
    let fixed = Fixed { attributes, partition_leader_epoch, producer_id, producer_epoch };
    let mut out = Vec::with_capacity(starts.len() - 1);
    let mut bodies: Vec<usize> = Vec::new();
    let mut section: Vec<u8> = Vec::new();
    let mut framed: Vec<u8> = Vec::new();
    for w in starts.windows(2) {
        let (first, end) = (w[0] as usize, w[1] as usize);
        let base_ts = ts[first];
        let max_ts = log_append_ms.unwrap_or_else(|| ts[first..end].iter().copied().max().unwrap());
        let seq = if first_sequence >= 0 { ((first_sequence + first as i64) & INT32_MAX) as i32 } else { -1 };
        bodies.clear();
        let mut size = 0usize;
        for i in first..end {
            let body = rows.body(i, ts[i].wrapping_sub(base_ts), (i - first) as i64);
            size += size_of(body as i64) + body;
            bodies.push(body);
        }
        let count = end - first;
        let write_records = |buf: &mut [u8]| {
            let mut at = 0;
            for (j, i) in (first..end).enumerate() {
                at = rows.write(buf, at, i, bodies[j], ts[i].wrapping_sub(base_ts), j as i64);
            }
        };
        if !lz4 {
            out.push(PyBytes::new_with(py, HEADER_SIZE + size, |batch: &mut [u8]| {
                write_records(&mut batch[HEADER_SIZE..]);
                write_header(batch, fixed, HEADER_SIZE + size, count, (base_ts, max_ts), seq);
                seal(batch);
                Ok(())
            })?);
            continue;
        }
        section.clear();
        section.resize(size, 0);
        write_records(&mut section);
        framed.clear();
        framed.resize(HEADER_SIZE, 0);
        lz4frame::compress_into(&section, &mut framed);
        let total = framed.len();
        write_header(&mut framed, fixed, total, count, (base_ts, max_ts), seq);
        seal(&mut framed);
        out.push(PyBytes::new(py, &framed));
    }
    Ok(out)
}
