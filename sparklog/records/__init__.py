"""Kafka v2 record batches: codec, compression, control records, partitioner hashing, file
records (zero-copy slices of segment files). The bottom of the layers: it imports only
`errors`. The names below load their module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .batch import (
        HEADER_SIZE,
        BatchHeader,
        RecordBatch,
        TimestampType,
        iter_batches,
        read_header,
        stamp,
    )
    from .builder import SimpleRecord, assemble_batch, build_batch
    from .compression import CompressionType
    from .control import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
    from .errors import CorruptRecordError
    from .record import Record

_MODULES = {
    "HEADER_SIZE": "batch",
    "BatchHeader": "batch",
    "RecordBatch": "batch",
    "TimestampType": "batch",
    "iter_batches": "batch",
    "read_header": "batch",
    "stamp": "batch",
    "SimpleRecord": "builder",
    "assemble_batch": "builder",
    "build_batch": "builder",
    "CompressionType": "compression",
    "ControlRecordType": "control",
    "EndTransactionMarker": "control",
    "build_end_txn_marker_batch": "control",
    "CorruptRecordError": "errors",
    "Record": "record",
}

__getattr__ = lazy_getattr(__name__, {n: f"{__name__}.{m}" for n, m in _MODULES.items()})

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
