//! A leader's check of one client batch before it is appended (Kafka's `LogValidator`), in one
//! pass that builds nothing.
//!
//! `sparklog.storage.log_validator` asks this first. `true` means every record parses as the
//! reference walk parses it and breaks no rule: offset deltas 0..n-1, a key on compacted
//! topics, CreateTime within the configured bounds, the header's maxTimestamp the records'
//! latest. `false` means "not sure": the reference walk then decides, and names the problem
//! when there is one. So a record is never accepted here that the reference would refuse.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use crate::buffers::Borrowed;
use crate::decode::{field, header_at, Header, COMPRESSION_MASK, HEADER_SIZE, LZ4, TIMESTAMP_TYPE_MASK};
use crate::lz4frame;
use crate::varint::Cursor;

/// The rules a batch's records must keep.
struct Rules {
    lowest: i64,
    highest: i64,
    compact: bool,
    check_time: bool,
}

/// True when the client batch at `buf[pos..pos + size]` (header and CRC checked already) may
/// be appended as it is; false leaves the verdict to the reference walk. `section` is the
/// records section decompressed by the caller for codecs other than LZ4, else None.
/// CreateTime must lie within [`lowest`, `highest`] when `check_time`; keys are required when
/// `compact`. An LZ4 section that unpacks to more than `max_bytes` is left to the reference,
/// which refuses it with RECORD_TOO_LARGE.
#[pyfunction]
#[pyo3(signature = (
    buf, pos, size, section, lowest, highest, compact, check_time,
    max_bytes = lz4frame::READ_MAX_BYTES
))]
#[allow(clippy::too_many_arguments)]
pub fn leader_check<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    pos: usize,
    size: usize,
    section: Option<PyBackedBytes>,
    lowest: i64,
    highest: i64,
    compact: bool,
    check_time: bool,
    max_bytes: usize,
) -> PyResult<bool> {
    let buf = Borrowed::new(buf)?;
    let buf = buf.bytes(py);
    let (Some(h), Some(raw)) = (
        header_at(buf, pos),
        pos.checked_add(size).and_then(|end| buf.get(pos.checked_add(HEADER_SIZE)?..end)),
    ) else {
        return Ok(false);
    };
    let mut scratch = Vec::new();
    let data: &[u8] = match (&section, h.attributes & COMPRESSION_MASK) {
        (Some(bytes), _) => bytes.as_ref(),
        (None, 0) => raw,
        (None, LZ4) if lz4frame::decompress_into(raw, &mut scratch, max_bytes) => &scratch,
        _ => return Ok(false),
    };
    let rules = Rules { lowest, highest, compact, check_time };
    Ok(passes(data, &h, &rules).is_some())
}

/// Some(()) when every record of `data` parses and keeps the rules; None otherwise.
fn passes(data: &[u8], h: &Header, rules: &Rules) -> Option<()> {
    let count = usize::try_from(h.records_count).ok().filter(|&c| c > 0)?;
    h.base_offset.checked_add(h.records_count as i64)?;
    let log_append = h.attributes & TIMESTAMP_TYPE_MASK != 0;
    let n = data.len();
    let mut c = Cursor::new(data, 0, n);
    let mut latest = i64::MIN;
    for i in 0..count {
        c.set_end(n);
        let size = usize::try_from(c.varint()?).ok()?;
        let end = c.pos.checked_add(size).filter(|&e| e <= n)?;
        c.set_end(end);
        c.take(1)?; // attributes: unused in v2
        let ts_delta = c.varlong()?;
        if usize::try_from(c.varint()?).ok()? != i {
            return None;
        }
        let key = field(&mut c, data).ok()?;
        field(&mut c, data).ok()?;
        let headers = c.varint()?;
        for _ in 0..headers.max(0) {
            field(&mut c, data).ok()??; // a null header key: the reference decides
            field(&mut c, data).ok()?;
        }
        if headers < 0 || c.pos != end {
            return None;
        }
        let ts = if log_append { h.max_timestamp } else { h.base_timestamp.checked_add(ts_delta)? };
        let late = ts != -1 && (ts < rules.lowest || ts > rules.highest);
        if (rules.compact && key.is_none()) || (rules.check_time && late) {
            return None;
        }
        latest = latest.max(ts);
    }
    (c.pos == n && (log_append || latest == h.max_timestamp)).then_some(())
}
