"""Kafka v2 record batches: codec, compression, control records, partitioner hashing."""

from sparklog.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    RecordBatch,
    TimestampType,
    iter_batches,
    read_header,
    stamp,
)
from sparklog.records.builder import SimpleRecord, assemble_batch, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.records.errors import CorruptRecordError
from sparklog.records.record import Record

__all__ = [
    "HEADER_SIZE",
    "BatchHeader",
    "CompressionType",
    "ControlRecordType",
    "CorruptRecordError",
    "EndTransactionMarker",
    "Record",
    "RecordBatch",
    "SimpleRecord",
    "TimestampType",
    "assemble_batch",
    "build_batch",
    "build_end_txn_marker_batch",
    "iter_batches",
    "read_header",
    "stamp",
]
