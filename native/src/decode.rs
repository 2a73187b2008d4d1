//! Records sections of v2 batches -> Arrow buffers in one pass (the consumer's and the
//! DataFrame reader's hot path).
//!
//! The caller (`sparklog.records.arrow_decode`) has walked the batches, checked their headers
//! and CRCs and chosen which to decode. Each chosen batch's records are parsed exactly as the
//! reference decoder (`sparklog.records.record.decode_records`) parses them and written
//! straight into the output columns. A batch the reference would reject, or one whose contents
//! this code does not take on (a header key that is not UTF-8, an offset past int64, a codec
//! it does not read), is taken back out and returned as "slow": the caller decodes it with the
//! reference, which raises its error or decodes the oddity. So results are the reference's.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyList, PyTuple};

use crate::buffers::{i64s, Borrowed, OwnedBuffer};
use crate::lz4frame;
use crate::varint::Cursor;

pub(crate) const HEADER_SIZE: usize = 61;
pub(crate) const COMPRESSION_MASK: i16 = 0x07;
pub(crate) const LZ4: i16 = 3;
pub(crate) const TIMESTAMP_TYPE_MASK: i16 = 0x08;

pub(crate) struct Header {
    pub base_offset: i64,
    pub attributes: i16,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub records_count: i32,
}

pub(crate) fn header_at(buf: &[u8], pos: usize) -> Option<Header> {
    let h = buf.get(pos..pos.checked_add(HEADER_SIZE)?)?;
    let i64_at = |a: usize| i64::from_be_bytes(h[a..a + 8].try_into().unwrap());
    Some(Header {
        base_offset: i64_at(0),
        attributes: i16::from_be_bytes(h[21..23].try_into().unwrap()),
        base_timestamp: i64_at(27),
        max_timestamp: i64_at(35),
        records_count: i32::from_be_bytes(h[57..61].try_into().unwrap()),
    })
}

/// An Arrow binary column being appended to: validity bitmap, int32 offsets, data.
#[derive(Default)]
struct Binary {
    validity: Vec<u8>,
    nulls: usize,
    offsets: Vec<u8>,
    data: Vec<u8>,
    len: usize,
    copy: bool, // false: only validity is kept (a leader's walk needs no bytes)
}

impl Binary {
    fn new(copy: bool) -> Self {
        Binary { offsets: 0i32.to_le_bytes().to_vec(), copy, ..Default::default() }
    }

    /// Append a value (None: null); false once the data passes int32 offsets.
    fn push(&mut self, value: Option<&[u8]>) -> bool {
        if self.len % 8 == 0 {
            self.validity.push(0);
        }
        match value {
            Some(v) => {
                self.validity[self.len / 8] |= 1 << (self.len % 8);
                if self.copy {
                    self.data.extend_from_slice(v);
                }
            }
            None => self.nulls += 1,
        }
        self.len += 1;
        let Ok(end) = i32::try_from(self.data.len()) else { return false };
        self.offsets.extend_from_slice(&end.to_le_bytes());
        true
    }

    fn mark(&self) -> BinaryMark {
        (self.len, self.nulls, self.data.len())
    }

    fn rollback(&mut self, (len, nulls, data): BinaryMark) {
        self.len = len;
        self.nulls = nulls;
        self.data.truncate(data);
        self.offsets.truncate(4 * (len + 1));
        self.validity.truncate(len.div_ceil(8));
        if len % 8 != 0 {
            self.validity[len / 8] &= (1u8 << (len % 8)) - 1;
        }
    }

    fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        let validity = if self.nulls > 0 {
            Some(OwnedBuffer::wrap(py, self.validity)?)
        } else {
            None
        };
        PyTuple::new(
            py,
            [
                validity.into_pyobject(py)?.into_any(),
                OwnedBuffer::wrap(py, self.offsets)?.into_any(),
                OwnedBuffer::wrap(py, self.data)?.into_any(),
            ],
        )
    }
}

/// Everything decoded so far, column by column.
struct Columns {
    keys: Binary,
    values: Binary,
    offsets: Vec<u8>,
    timestamps: Vec<u8>,
    types: Vec<u8>,
    n: usize,
    headers: Option<Headers>,
}

struct Headers {
    list_validity: Vec<u8>,
    with_headers: usize,
    list_offsets: Vec<u8>,
    keys: Binary,
    values: Binary,
}

type BinaryMark = (usize, usize, usize);
type Mark = (usize, BinaryMark, BinaryMark, Option<(usize, BinaryMark, BinaryMark)>);

impl Columns {
    fn new(include_headers: bool, copy_data: bool) -> Self {
        Columns {
            keys: Binary::new(copy_data),
            values: Binary::new(copy_data),
            offsets: Vec::new(),
            timestamps: Vec::new(),
            types: Vec::new(),
            n: 0,
            headers: include_headers.then(|| Headers {
                list_validity: Vec::new(),
                with_headers: 0,
                list_offsets: 0i32.to_le_bytes().to_vec(),
                keys: Binary::new(true),
                values: Binary::new(true),
            }),
        }
    }

    fn mark(&self) -> Mark {
        let h = self.headers.as_ref().map(|h| (h.with_headers, h.keys.mark(), h.values.mark()));
        (self.n, self.keys.mark(), self.values.mark(), h)
    }

    fn rollback(&mut self, m: Mark) {
        let n = m.0;
        self.n = n;
        self.keys.rollback(m.1);
        self.values.rollback(m.2);
        self.offsets.truncate(8 * n);
        self.timestamps.truncate(8 * n);
        self.types.truncate(4 * n);
        if let (Some(h), Some((with, k, v))) = (self.headers.as_mut(), m.3) {
            h.with_headers = with;
            h.keys.rollback(k);
            h.values.rollback(v);
            h.list_offsets.truncate(4 * (n + 1));
            h.list_validity.truncate(n.div_ceil(8));
            if n % 8 != 0 {
                h.list_validity[n / 8] &= (1u8 << (n % 8)) - 1;
            }
        }
    }
}

/// Why a section was not decoded here.
pub(crate) enum Refused {
    /// The reference decides (it raises, or decodes an oddity): decode this batch slowly.
    Slow,
    /// The columns would pass 2 GiB: the caller decodes everything another way.
    TooBig,
}

/// A nullable length-prefixed field: the bytes or None for null; Err where the reference raises.
pub(crate) fn field<'a>(c: &mut Cursor<'a>, data: &'a [u8]) -> Result<Option<&'a [u8]>, Refused> {
    let len = c.varint().ok_or(Refused::Slow)?;
    if len < 0 {
        return if len == -1 { Ok(None) } else { Err(Refused::Slow) };
    }
    let start = c.take(len as usize).ok_or(Refused::Slow)?;
    Ok(Some(&data[start..start + len as usize]))
}

/// Parse and append all records of one section, as `decode_records` reads them.
fn append_section(data: &[u8], h: &Header, out: &mut Columns) -> Result<(), Refused> {
    let n = data.len();
    let log_append = h.attributes & TIMESTAMP_TYPE_MASK != 0;
    let mut c = Cursor::new(data, 0, n);
    for _ in 0..h.records_count.max(0) {
        c.set_end(n);
        let size = c.varint().ok_or(Refused::Slow)?;
        let end = usize::try_from(size)
            .ok()
            .and_then(|s| c.pos.checked_add(s))
            .filter(|&e| e <= n)
            .ok_or(Refused::Slow)?;
        c.set_end(end); // a field read past the record's end makes the reference raise too
        c.take(1).ok_or(Refused::Slow)?; // attributes: unused in v2
        let ts_delta = c.varlong().ok_or(Refused::Slow)?;
        let offset_delta = c.varint().ok_or(Refused::Slow)?;
        let key = field(&mut c, data)?;
        let value = field(&mut c, data)?;
        let count = c.varint().ok_or(Refused::Slow)?;
        if count < 0 {
            return Err(Refused::Slow);
        }
        let mut fits = out.keys.push(key) & out.values.push(value);
        match out.headers.as_mut() {
            Some(hs) => {
                for _ in 0..count {
                    let k = field(&mut c, data)?.ok_or(Refused::Slow)?; // null key: raises
                    if std::str::from_utf8(k).is_err() {
                        return Err(Refused::Slow); // the reference replaces bad UTF-8
                    }
                    let v = field(&mut c, data)?;
                    fits &= hs.keys.push(Some(k)) & hs.values.push(v);
                }
                let i = out.n;
                if i % 8 == 0 {
                    hs.list_validity.push(0);
                }
                if count > 0 {
                    hs.list_validity[i / 8] |= 1 << (i % 8);
                    hs.with_headers += 1;
                }
                let entries = i32::try_from(hs.keys.len).map_err(|_| Refused::TooBig)?;
                hs.list_offsets.extend_from_slice(&entries.to_le_bytes());
            }
            None => {
                for _ in 0..count {
                    field(&mut c, data)?.ok_or(Refused::Slow)?;
                    field(&mut c, data)?;
                }
            }
        }
        if !fits {
            return Err(Refused::TooBig);
        }
        if c.pos != end {
            return Err(Refused::Slow);
        }
        let offset = h.base_offset.checked_add(i64::from(offset_delta)).ok_or(Refused::Slow)?;
        let timestamp =
            if log_append { h.max_timestamp } else { h.base_timestamp.wrapping_add(ts_delta) };
        out.offsets.extend_from_slice(&offset.to_le_bytes());
        out.timestamps.extend_from_slice(&timestamp.to_le_bytes());
        out.types.extend_from_slice(&i32::from(log_append).to_le_bytes());
        out.n += 1;
    }
    if c.pos == n {
        Ok(())
    } else {
        Err(Refused::Slow)
    }
}

/// Decode the records of the batches at `positions` (int64 LE, with `sizes`) of `buf`.
///
/// `sections[i]` is batch i's decompressed records section when the caller decompressed it,
/// else None: an uncompressed or LZ4 section is read here, any other codec makes the batch slow.
/// Returns None when the columns would pass 2 GiB (the caller decodes another way), else
/// (n, key column, value column, offsets, timestamps, timestamp types, headers or None, slow
/// batch indexes); a column is (validity or None, int32 offsets, data), headers are (list
/// validity or None, list offsets, key column, value column) or None when no record has any;
/// numbers are little-endian; buffers are read-only and shared with Arrow without copies.
/// Without `copy_data` keys and values are checked but not copied (their data stays empty):
/// what a leader's validation walk needs. An LZ4 section unpacking to more than `max_bytes` is
/// slow (the reference refuses it with RECORD_TOO_LARGE).
#[pyfunction]
#[pyo3(signature = (
    buf, positions, sizes, sections, include_headers, copy_data = true,
    max_bytes = lz4frame::READ_MAX_BYTES
))]
pub fn decode_sections<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    positions: &[u8],
    sizes: &[u8],
    sections: Vec<Option<PyBackedBytes>>,
    include_headers: bool,
    copy_data: bool,
    max_bytes: usize,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let buf = Borrowed::new(buf)?;
    let buf = buf.bytes(py);
    let (positions, sizes) = (i64s(positions), i64s(sizes));
    if positions.len() != sections.len() || sizes.len() != sections.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "positions, sizes and sections must have one entry per batch",
        ));
    }
    let mut out = Columns::new(include_headers, copy_data);
    if copy_data {
        out.values.data.reserve(sizes.iter().map(|&s| s.max(0) as usize).sum());
    }
    let mut slow: Vec<usize> = Vec::new();
    let mut scratch: Vec<u8> = Vec::new();
    for (b, given) in sections.iter().enumerate() {
        let (pos, size) = (positions[b] as usize, sizes[b] as usize);
        let (Some(h), Some(raw)) = (
            header_at(buf, pos),
            buf.get(pos.saturating_add(HEADER_SIZE)..pos.saturating_add(size)),
        ) else {
            slow.push(b);
            continue;
        };
        let section: Option<&[u8]> = match (given, h.attributes & COMPRESSION_MASK) {
            (Some(bytes), _) => Some(bytes.as_ref()),
            _ if raw.is_empty() => Some(raw),
            (None, 0) => Some(raw),
            (None, LZ4) => lz4frame::decompress_into(raw, &mut scratch, max_bytes)
                .then_some(&scratch[..]),
            (None, _) => None,
        };
        let Some(section) = section else {
            slow.push(b);
            continue;
        };
        let mark = out.mark();
        match append_section(section, &h, &mut out) {
            Ok(()) => {}
            Err(Refused::Slow) => {
                out.rollback(mark);
                slow.push(b);
            }
            Err(Refused::TooBig) => return Ok(None),
        }
    }
    let headers = match out.headers {
        Some(h) if h.with_headers > 0 => {
            let validity = if h.with_headers < out.n {
                Some(OwnedBuffer::wrap(py, h.list_validity)?)
            } else {
                None
            };
            Some(PyTuple::new(
                py,
                [
                    validity.into_pyobject(py)?.into_any(),
                    OwnedBuffer::wrap(py, h.list_offsets)?.into_any(),
                    h.keys.into_py(py)?.into_any(),
                    h.values.into_py(py)?.into_any(),
                ],
            )?)
        }
        _ => None,
    };
    Ok(Some(PyTuple::new(
        py,
        [
            out.n.into_pyobject(py)?.into_any(),
            out.keys.into_py(py)?.into_any(),
            out.values.into_py(py)?.into_any(),
            OwnedBuffer::wrap(py, out.offsets)?.into_any(),
            OwnedBuffer::wrap(py, out.timestamps)?.into_any(),
            OwnedBuffer::wrap(py, out.types)?.into_any(),
            headers.into_pyobject(py)?.into_any(),
            PyList::new(py, slow)?.into_any(),
        ],
    )?))
}
