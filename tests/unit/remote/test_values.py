"""Typed values in the topic table: Spark DDL and Avro schemas as Arrow types, values decoded
into `value_typed`, records that do not decode kept raw with `value_error`, the tier going on
(and its batches still record-identical)."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid

import pyarrow as pa
import pytest

from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.storage.remote.table import DeltaTopicTable
from sparklog.storage.remote.tier import SegmentUpload
from sparklog.storage.remote.values import (
    ValueSchemaError,
    avro_arrow_type,
    parse_ddl,
    value_decoder,
)

fastavro = pytest.importorskip("fastavro")

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def test_spark_ddl_as_arrow() -> None:
    struct = parse_ddl(
        "id BIGINT NOT NULL, `the name` STRING COMMENT 'who', price DECIMAL(10, 2), "
        "tags ARRAY<STRING>, attrs MAP<STRING, INT>, at TIMESTAMP, day DATE, "
        "inner STRUCT<a: INT, b: DOUBLE>"
    )
    assert struct == pa.struct(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("the name", pa.string()),
            pa.field("price", pa.decimal128(10, 2)),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.map_(pa.string(), pa.int32())),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("day", pa.date32()),
            pa.field("inner", pa.struct([("a", pa.int32()), ("b", pa.float64())])),
        ]
    )
    with pytest.raises(ValueSchemaError, match="TIMESTAMP_NTZ"):
        parse_ddl("t TIMESTAMP_NTZ")
    with pytest.raises(ValueSchemaError, match="unknown DDL type"):
        parse_ddl("a WHATEVER")
    with pytest.raises(ValueSchemaError, match="needs remote.table.value.schema"):
        value_decoder("json", " ")


def test_json_values_decode_and_bad_ones_become_dead_letters() -> None:
    decoder = value_decoder("json", "id BIGINT, name STRING")
    assert decoder is not None
    good = pa.array([b'{"id": 1, "name": "a"}', None, b'{\n "id": 2,\n "extra": true}'])
    typed, errors = decoder.decode(good)
    assert typed.to_pylist() == [{"id": 1, "name": "a"}, None, {"id": 2, "name": None}]
    assert errors.null_count == 3
    mixed = pa.array([b'{"id": 1}', b"not json", b"", b'{"id": "x"}', b'{"id": 5}'])
    typed, errors = decoder.decode(mixed)
    assert typed.to_pylist() == [{"id": 1, "name": None}, None, None, None, {"id": 5, "name": None}]
    assert [e is not None for e in errors.to_pylist()] == [False, True, True, True, False]
    assert "json value does not decode" in errors[1].as_py()


SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lines", "type": {"type": "array", "items": "int"}},
    ],
}


def avro(obj: dict, confluent: bool = False) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), obj)
    return (b"\x00\x00\x00\x00\x07" if confluent else b"") + out.getvalue()


def test_avro_values_bare_and_confluent_framed() -> None:
    assert avro_arrow_type(SCHEMA) == pa.struct(
        [
            ("id", pa.int64()),
            ("note", pa.string()),
            ("at", pa.timestamp("ms", tz="UTC")),
            ("lines", pa.list_(pa.int32())),
        ]
    )
    decoder = value_decoder("avro", json.dumps(SCHEMA))
    assert decoder is not None
    at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    one = {"id": 1, "note": None, "at": at, "lines": [1, 2]}
    two = {"id": 2, "note": "x", "at": at, "lines": []}
    typed, errors = decoder.decode(pa.array([avro(one), avro(two, confluent=True), b"\x01"]))
    assert typed.to_pylist()[:2] == [one, two]
    assert typed[2].as_py() is None and errors[2].as_py().startswith("avro value does not")


def test_the_table_holds_typed_values_and_still_rebuilds_the_batches(tmp_path) -> None:
    table = DeltaTopicTable(
        str(tmp_path / "tier"),
        "orders",
        TOPIC_ID,
        value_format="json",
        value_schema="id BIGINT, name STRING",
    )
    values = [b'{"id": 1, "name": "a"}', b"{broken", None]
    batch = build_batch([SimpleRecord(v, b"k", 1000) for v in values])
    table.append([SegmentUpload(0, 0, 3, batch)])
    rows = table._dt.to_pyarrow_dataset().to_table(use_threads=False).sort_by("offset")
    assert rows.column("value_typed").to_pylist() == [{"id": 1, "name": "a"}, None, None]
    assert [e is not None for e in rows.column("value_error").to_pylist()] == [False, True, False]
    assert table.read(0, 0, 1 << 20).records == batch
    # typed values switched off: later uploads leave the columns null, the tier goes on
    table.configure_values("binary", "")
    more = build_batch([SimpleRecord(b"raw", None, 2000)], base_offset=3)
    table.append([SegmentUpload(0, 3, 4, more)])
    # and on again with another type for the column: a note instead of typed values
    table.configure_values("json", "id STRING")
    last = build_batch([SimpleRecord(b'{"id": "z"}', None, 3000)], base_offset=4)
    table.append([SegmentUpload(0, 4, 5, last)])
    rows = table._dt.to_pyarrow_dataset().to_table(use_threads=False).sort_by("offset")
    assert rows.column("value").to_pylist()[3:] == [b"raw", b'{"id": "z"}']
    assert rows.column("value_typed").to_pylist()[3:] == [None, None]
    assert "another type" in rows.column("value_error")[4].as_py()
    assert table.read(0, 0, 1 << 20).records == batch + more + last


def test_a_schema_that_rejects_every_record_never_stops_the_tier(tmp_path) -> None:
    # issue 32 §4: every record a dead letter, every upload still committed and readable
    table = DeltaTopicTable(
        str(tmp_path / "tier"), "orders", TOPIC_ID, value_format="json", value_schema="id BIGINT"
    )
    batches = []
    for base in (0, 4, 8):
        values = [b"not json %d" % i for i in range(4)]
        batches.append(
            build_batch([SimpleRecord(v, None, 1000 + base) for v in values], base_offset=base)
        )
        assert table.append([SegmentUpload(0, base, base + 4, batches[-1])]) is not None
    assert table.copied_end_offset(0) == 12
    rows = table._dt.to_pyarrow_dataset().to_table(use_threads=False)
    assert rows.num_rows == 12 and rows.column("value_typed").null_count == 12
    assert all(e and "does not" in e for e in rows.column("value_error").to_pylist())
    assert table.read(0, 0, 1 << 20).records == b"".join(batches)
