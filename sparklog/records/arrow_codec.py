"""Arrow <-> Kafka v2 record batches, vectorized: the record codec's hot paths (DESIGN D3, D11).

`build_batches` turns Arrow columns (`key`, `value`, `timestamp`, `headers`) into v2 batches and
`decode_batches` turns a buffer of concatenated batches (a Fetch response's records, a chunk of
a segment) back into Arrow columns, both without a Python loop per record. The per-record
codec (`record.py`, `builder.py`) defines the format; these paths produce and accept exactly
the same bytes. Encoding lives in `arrow_encode`, decoding in `arrow_decode`.
"""

from sparklog.records.arrow_decode import (
    HEADERS_TYPE,
    RECORDS_SCHEMA,
    RECORDS_WITH_HEADERS_SCHEMA,
    DecodedBatches,
    decode_batches,
    read_batches,
)
from sparklog.records.arrow_encode import EncodedRecords, build_batches, encode_records_section

__all__ = [
    "HEADERS_TYPE",
    "RECORDS_SCHEMA",
    "RECORDS_WITH_HEADERS_SCHEMA",
    "DecodedBatches",
    "EncodedRecords",
    "build_batches",
    "decode_batches",
    "encode_records_section",
    "read_batches",
]
