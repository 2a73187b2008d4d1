//! sparklog's optional native record core (DESIGN D13), loaded as the `sparklog_native` module.
//!
//! Byte-level hot paths of Kafka v2 record batches: records sections -> Arrow buffers (decode),
//! Arrow buffers -> records sections (encode), a leader's one-pass check of client batches,
//! records appended one by one (the producer's batch builder) and the producer's per-record
//! futures, LZ4 frames, CRC-32C and murmur2. The pure-Python
//! codec in `sparklog.records` is the reference; a differential test suite keeps both identical.
//! Untrusted bytes (fetched or stored batches) are parsed only by safe Rust: the one `unsafe`
//! block of the crate borrows Arrow buffers handed over by Python (`buffers.rs`).

use pyo3::prelude::*;

mod buffers;
mod builder;
mod checksums;
mod decode;
mod encode;
mod future;
mod leader_check;
mod lz4frame;
mod murmur2;
mod varint;

#[pymodule]
fn sparklog_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode::decode_sections, m)?)?;
    m.add_function(wrap_pyfunction!(leader_check::leader_check, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_records, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_batches, m)?)?;
    m.add_function(wrap_pyfunction!(lz4frame::lz4_frame_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(checksums::crc32c, m)?)?;
    m.add_function(wrap_pyfunction!(checksums::first_bad_crc, m)?)?;
    m.add_function(wrap_pyfunction!(murmur2::murmur2_hashes, m)?)?;
    m.add_class::<buffers::OwnedBuffer>()?;
    m.add_class::<builder::RecordsBuilder>()?;
    m.add_class::<future::RecordFuture>()?;
    m.add_function(wrap_pyfunction!(future::resolve_all, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
