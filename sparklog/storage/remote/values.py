"""Typed values in the topic table (`remote.table.value.format` = json | avro, with
`remote.table.value.schema`): each record's value decoded into a `value_typed` column beside
the raw `value`, and `value_error` saying why a record did not decode (dead letters inline: the
raw value stays, the upload goes on; a record never blocks the tier).

JSON: the schema is Spark DDL (`id BIGINT, name STRING, tags ARRAY<STRING>`), parsed here into
an Arrow struct (no pyspark below the spark layer); values are parsed by Arrow's JSON reader,
all at once, and one by one only when that fails, to find the records at fault. Avro: the
schema is an Avro schema (JSON); values are Avro binary, bare or in Confluent's wire format
(magic byte 0 and a 4-byte schema id), decoded with `fastavro`.

Types stay within Delta protocol (1, 2): TIMESTAMP_NTZ is refused (it needs a table feature).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

TYPED_COLUMN = "value_typed"
ERROR_COLUMN = "value_error"
FORMATS = ("binary", "json", "avro")


class ValueSchemaError(ValueError):
    """`remote.table.value.schema` cannot be used with the format; the message says why."""


@dataclass(frozen=True, slots=True)
class ValueDecoder:
    """Decodes a column of raw values into (typed, error) columns."""

    format: str
    arrow_type: pa.DataType
    decode_one: Callable[[bytes], Any]  # a one-row Arrow array, or raises
    decode_all: Callable[[pa.Array], pa.Array | None]  # None: some value does not decode

    def fields(self) -> list[pa.Field]:
        return [pa.field(TYPED_COLUMN, self.arrow_type), pa.field(ERROR_COLUMN, pa.string())]

    def append_to(self, rows: pa.Table) -> pa.Table:
        """`rows` with the typed and error columns of their `value` column."""
        typed, errors = self.decode(rows.column("value"))
        typed_field, error_field = self.fields()
        return rows.append_column(typed_field, typed).append_column(error_field, errors)

    def decode(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """The typed values (null where a value is null or does not decode) and the errors
        (null where it decoded)."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        typed = self.decode_all(values)
        if typed is not None:
            return typed, pa.nulls(len(values), pa.string())
        pieces: list[pa.Array] = []
        errors: list[str | None] = []
        for value in values.to_pylist():
            if value is None:
                pieces.append(pa.nulls(1, self.arrow_type))
                errors.append(None)
                continue
            try:
                pieces.append(self.decode_one(value))
                errors.append(None)
            except Exception as e:  # noqa: BLE001 - any decoding failure is a dead letter
                pieces.append(pa.nulls(1, self.arrow_type))
                errors.append(f"{self.format} value does not decode: {type(e).__name__}: {e}"[:500])
        return pa.concat_arrays(pieces), pa.array(errors, pa.string())


def without_typed(rows: pa.Table, why: str) -> pa.Table:
    """`rows` without their typed values, `why` in every error (the table's typed column
    has another type: the upload goes on)."""
    rows = rows.drop_columns([TYPED_COLUMN, ERROR_COLUMN])
    return rows.append_column(ERROR_COLUMN, pa.array([why] * rows.num_rows, pa.string()))


def value_decoder(value_format: str, schema: str) -> ValueDecoder | None:
    """The decoder of a topic's settings; None for binary (no typed columns)."""
    if value_format == "binary":
        return None
    if not schema.strip():
        raise ValueSchemaError(
            f"remote.table.value.format={value_format} needs remote.table.value.schema "
            "(Spark DDL for json, an Avro schema for avro)"
        )
    if value_format == "json":
        return _json_decoder(parse_ddl(schema))
    if value_format == "avro":
        return _avro_decoder(schema)
    raise ValueSchemaError(f"remote.table.value.format must be one of {FORMATS}")


# ----------------------------------------------------------------------------------- JSON


def _json_decoder(struct: pa.StructType) -> ValueDecoder:
    schema = pa.schema(list(struct))
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def one(value: bytes) -> pa.Array:
        table = pj.read_json(io.BytesIO(value.replace(b"\n", b" ")), parse_options=options)
        if table.num_rows != 1:
            raise ValueError(f"{table.num_rows} JSON objects in one value")
        return table.select(schema.names).to_struct_array().combine_chunks()

    def all_(values: pa.Array) -> pa.Array | None:
        present = pc.fill_null(pc.greater(pc.binary_length(values), 0), False)
        if not pc.all(pc.or_(present, pc.is_null(values))).as_py():
            return None  # an empty value: find it one by one
        body = values.filter(present)
        # a raw newline in valid JSON is whitespace: one value per line
        lines = pc.replace_substring(body, b"\n", b" ")
        data = b"\n".join(v for v in lines.to_pylist() if v is not None)
        if not data:
            return pa.nulls(len(values), struct)
        try:
            table = pj.read_json(
                io.BytesIO(data),
                read_options=pj.ReadOptions(block_size=max(len(data) + 1, 1 << 20)),
                parse_options=options,
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(body):
            return None
        parsed = table.select(schema.names).to_struct_array().combine_chunks()
        if len(body) == len(values):
            return parsed
        positions = pc.subtract(pc.cumulative_sum(pc.cast(present, pa.int64())), 1)
        return parsed.take(pc.if_else(present, positions, pa.scalar(None, pa.int64())))

    return ValueDecoder("json", struct, one, all_)


_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")
_SIMPLE = {
    "string": pa.string(),
    "varchar": pa.string(),
    "char": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
}


def parse_ddl(ddl: str) -> pa.StructType:
    """Spark DDL (`a INT, b STRUCT<c: STRING> NOT NULL COMMENT 'x'`) as an Arrow struct."""
    tokens = _tokens(ddl)
    fields = _fields(tokens, end=None)
    if tokens:
        raise ValueSchemaError(f"unexpected {tokens[0]!r} in the DDL schema {ddl!r}")
    if not fields:
        raise ValueSchemaError(f"the DDL schema {ddl!r} has no fields")
    return pa.struct(fields)


def _tokens(ddl: str) -> list[str]:
    out, pos = [], 0
    while pos < len(ddl):
        if not ddl[pos:].strip():
            break
        m = _TOKEN.match(ddl, pos)
        if m is None:
            raise ValueSchemaError(f"cannot read the DDL schema at {ddl[pos : pos + 20]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _fields(tokens: list[str], end: str | None) -> list[pa.Field]:
    fields: list[pa.Field] = []
    while tokens and tokens[0] != end:
        name = tokens.pop(0)
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        if tokens and tokens[0] == ":":
            tokens.pop(0)
        kind = _type(tokens)
        nullable = True
        while tokens and tokens[0].lower() in ("not", "comment"):
            word = tokens.pop(0).lower()
            if word == "not" and tokens and tokens.pop(0).lower() == "null":
                nullable = False
            elif word == "comment" and tokens:
                tokens.pop(0)
        fields.append(pa.field(name, kind, nullable=nullable))
        if tokens and tokens[0] == ",":
            tokens.pop(0)
    return fields


def _expect(tokens: list[str], token: str) -> None:
    if not tokens or tokens.pop(0) != token:
        raise ValueSchemaError(f"expected {token!r} in the DDL schema")


def _type(tokens: list[str]) -> pa.DataType:
    if not tokens:
        raise ValueSchemaError("a DDL field without a type")
    word = tokens.pop(0).lower()
    if word == "array":
        _expect(tokens, "<")
        item = _type(tokens)
        _expect(tokens, ">")
        return pa.list_(item)
    if word == "map":
        _expect(tokens, "<")
        key = _type(tokens)
        _expect(tokens, ",")
        value = _type(tokens)
        _expect(tokens, ">")
        return pa.map_(key, value)
    if word == "struct":
        _expect(tokens, "<")
        fields = _fields(tokens, end=">")
        _expect(tokens, ">")
        return pa.struct(fields)
    args = []
    if tokens and tokens[0] == "(":
        tokens.pop(0)
        while tokens and tokens[0] != ")":
            token = tokens.pop(0)
            if token != ",":
                args.append(int(token))
        _expect(tokens, ")")
    if word in ("decimal", "dec", "numeric"):
        precision, scale = (args + [10, 0][len(args) :])[:2]
        return pa.decimal128(precision, scale)
    if word == "timestamp_ntz":
        raise ValueSchemaError(
            "TIMESTAMP_NTZ needs a Delta table feature (the topic table stays at protocol 1, 2): "
            "use TIMESTAMP"
        )
    if word not in _SIMPLE:
        raise ValueSchemaError(f"unknown DDL type {word!r}")
    return _SIMPLE[word]


# ----------------------------------------------------------------------------------- Avro


def _avro_decoder(schema_text: str) -> ValueDecoder:
    try:
        import fastavro
    except ImportError:
        raise ValueSchemaError(
            "remote.table.value.format=avro needs the fastavro package: "
            "pip install 'sparklog[avro]'"
        ) from None
    try:
        schema = fastavro.parse_schema(json.loads(schema_text))
    except Exception as e:  # noqa: BLE001 - named for the user
        raise ValueSchemaError(f"remote.table.value.schema is not an Avro schema: {e}") from None
    arrow_type = avro_arrow_type(json.loads(schema_text))

    def record(value: bytes) -> Any:
        for body in (value, value[5:] if len(value) >= 5 and value[0] == 0 else None):
            if body is None:
                break
            buf = io.BytesIO(body)
            try:
                obj = fastavro.schemaless_reader(buf, schema, None)
            except Exception:  # noqa: BLE001 - try Confluent's framing next
                continue
            if buf.tell() == len(body):
                return obj
        raise ValueError("not Avro binary of the schema (bare or Confluent-framed)")

    def one(value: bytes) -> pa.Array:
        return pa.array([record(value)], arrow_type)

    def all_(values: pa.Array) -> pa.Array | None:
        try:
            return pa.array(
                [None if v is None else record(v) for v in values.to_pylist()], arrow_type
            )
        except Exception:  # noqa: BLE001 - find the records at fault one by one
            return None

    return ValueDecoder("avro", arrow_type, one, all_)


_AVRO_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def avro_arrow_type(schema: Any, named: dict[str, pa.DataType] | None = None) -> pa.DataType:
    """The Arrow type of an Avro schema (records as structs, nullable unions as their type)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise ValueSchemaError(f"unknown Avro type {schema!r}")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise ValueSchemaError(f"only [null, T] unions map to a column, got {schema}")
        return avro_arrow_type(branches[0], named)
    logical = schema.get("logicalType")
    kind = schema.get("type")
    if logical == "date":
        return pa.date32()
    if logical == "timestamp-millis":
        return pa.timestamp("ms", tz="UTC")
    if logical == "timestamp-micros":
        return pa.timestamp("us", tz="UTC")
    if logical == "decimal":
        return pa.decimal128(schema["precision"], schema.get("scale", 0))
    if kind == "record":
        fields = [pa.field(f["name"], avro_arrow_type(f["type"], named)) for f in schema["fields"]]
        named[schema["name"]] = pa.struct(fields)
        return named[schema["name"]]
    if kind == "enum":
        named[schema["name"]] = pa.string()
        return pa.string()
    if kind == "fixed":
        named[schema["name"]] = pa.binary()
        return pa.binary()
    if kind == "array":
        return pa.list_(avro_arrow_type(schema["items"], named))
    if kind == "map":
        return pa.map_(pa.string(), avro_arrow_type(schema["values"], named))
    return avro_arrow_type(kind, named)
