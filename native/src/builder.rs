//! The producer's per-record batch builder (Kafka's `MemoryRecordsBuilder`).
//!
//! `send()` appends each record here as it comes, so a batch's records section grows in one
//! buffer and no Python object is kept per record; the sender then wraps the section in a
//! header (LZ4-framed when asked) with one call. Bytes are those of `records.encode_record`
//! and `builder.assemble_batch`; `records/records_builder.py` holds the Python reference.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::encode::{seal, write_header, Fixed, HEADER_SIZE};
use crate::lz4frame;
use crate::varint::{put, size_of};

/// Records appended one at a time: offset deltas 0, 1, ..; timestamp deltas from the first.
#[pyclass(module = "sparklog_native")]
pub struct RecordsBuilder {
    section: Vec<u8>,
    timestamps: Vec<i64>,
    max_timestamp: i64,
}

fn push_varint(out: &mut Vec<u8>, v: i64) {
    let at = out.len();
    out.resize(at + size_of(v), 0);
    put(out, at, v);
}

fn push_field(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            push_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
        None => push_varint(out, -1),
    }
}

/// The header entries of a record as the wire has them (after the count).
fn header_entries(headers: &Bound<'_, PyTuple>, out: &mut Vec<u8>) -> PyResult<()> {
    let bad_pair = || PyValueError::new_err("headers must be (str, bytes | None) pairs");
    for item in headers.iter() {
        let pair = item.cast_into::<PyTuple>().map_err(|_| bad_pair())?;
        if pair.len() != 2 {
            return Err(bad_pair());
        }
        let key = pair.get_item(0)?;
        let key = key.cast::<PyString>().map_err(|_| PyValueError::new_err("header keys must be str"))?;
        push_field(out, Some(key.to_str()?.as_bytes()));
        let value = pair.get_item(1)?;
        if value.is_none() {
            push_field(out, None);
        } else {
            let value = value
                .cast::<PyBytes>()
                .map_err(|_| PyValueError::new_err("header values must be bytes or None"))?;
            push_field(out, Some(value.as_bytes()));
        }
    }
    Ok(())
}

#[pymethods]
impl RecordsBuilder {
    #[new]
    fn new() -> Self {
        RecordsBuilder { section: Vec::new(), timestamps: Vec::new(), max_timestamp: i64::MIN }
    }

    /// Append one record; `headers` is a tuple of (str, bytes | None) pairs.
    #[pyo3(signature = (timestamp, key, value, headers))]
    fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let offset_delta = self.timestamps.len() as i64;
        let ts_delta = timestamp.wrapping_sub(*self.timestamps.first().unwrap_or(&timestamp));
        let mut entries = Vec::new();
        header_entries(headers, &mut entries)?;
        let mut body = 1 + size_of(ts_delta) + size_of(offset_delta);
        for f in [key, value] {
            body += f.map_or(size_of(-1), |b| size_of(b.len() as i64) + b.len());
        }
        body += size_of(headers.len() as i64) + entries.len();
        let out = &mut self.section;
        out.reserve(size_of(body as i64) + body);
        push_varint(out, body as i64);
        out.push(0); // attributes
        push_varint(out, ts_delta);
        push_varint(out, offset_delta);
        push_field(out, key);
        push_field(out, value);
        push_varint(out, headers.len() as i64);
        out.extend_from_slice(&entries);
        self.timestamps.push(timestamp);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(())
    }

    /// Records appended so far.
    #[getter]
    fn count(&self) -> usize {
        self.timestamps.len()
    }

    #[getter]
    fn base_timestamp(&self) -> Option<i64> {
        self.timestamps.first().copied()
    }

    #[getter]
    fn max_timestamp(&self) -> Option<i64> {
        self.timestamps.first().map(|_| self.max_timestamp)
    }

    /// Every record's timestamp, in order.
    fn timestamps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.timestamps)
    }

    /// The uncompressed records section.
    fn section<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.section)
    }

    /// The whole v2 batch (base offset 0), its section LZ4-framed when `lz4`.
    #[pyo3(signature = (attributes, producer_id, producer_epoch, base_sequence, lz4))]
    fn build<'py>(
        &self,
        py: Python<'py>,
        attributes: i16,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        lz4: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let count = self.timestamps.len();
        if count == 0 {
            return Err(PyValueError::new_err("a record batch needs at least one record"));
        }
        let fixed = Fixed { attributes, partition_leader_epoch: -1, producer_id, producer_epoch };
        let ts = (self.timestamps[0], self.max_timestamp);
        if !lz4 {
            let size = HEADER_SIZE + self.section.len();
            return PyBytes::new_with(py, size, |batch: &mut [u8]| {
                batch[HEADER_SIZE..].copy_from_slice(&self.section);
                write_header(batch, fixed, size, count, ts, base_sequence);
                seal(batch);
                Ok(())
            });
        }
        let framed = py.detach(|| {
            let mut framed = vec![0u8; HEADER_SIZE];
            lz4frame::compress_into(&self.section, &mut framed);
            let size = framed.len();
            write_header(&mut framed, fixed, size, count, ts, base_sequence);
            seal(&mut framed);
            framed
        });
        Ok(PyBytes::new(py, &framed))
    }
}
