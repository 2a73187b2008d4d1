"""Benchmark: Arrow <-> Kafka v2 batches, sparklog's vectorized codec against aiokafka's C codec.

The same work done two ways, for compression none, lz4 and zstd:

- encode: Arrow arrays (key 10 B, value 100 B, timestamp) -> v2 batches of about 1 MiB.
  sparklog: `build_batches`. aiokafka: `to_pylist()` of the columns, then
  `DefaultRecordBatchBuilder.append` per record (the C extension), a new builder when full.
- decode: one buffer of those batches (offsets assigned, as a broker would) -> Arrow arrays
  `key, value, offset, timestamp`. sparklog: `decode_batches`. aiokafka: `MemoryRecords` over
  the buffer and its `DefaultRecordBatch`es (C, as aiokafka's Fetcher reads a fetch, CRCs
  checked as both consumers do by default), the records' fields into lists, `pa.array` per
  column.

Each measurement is the best of `--repeat` runs with the garbage collector paused (kinder to
aiokafka, whose path allocates a Python object per record). Rates are per core: bytes and
records over the CPU time of this single-threaded process. Ratios are sparklog/aiokafka
throughput; `encode_ratio` and `decode_ratio` are the worst over the three codecs. Both sides
compress zstd at level 3; aiokafka's lz4 default is level 9 (HC) where sparklog uses lz4's fast
mode, so the lz4 encode ratio is taken with aiokafka patched to the same level (its level-9
figure is reported too, as `encode_ratio_vs_lz4_level9`).

Usage: .venv/bin/python jobs/bench_records.py [--records N] [--json FILE]

Other benchmarks add their figures to the same JSON: write a function taking the parsed
arguments and returning a dict, and append it to `SECTIONS` (the log-append benchmark adds
`append_ratio` this way).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from sparklog.records.arrow_codec import build_batches, decode_batches
from sparklog.records.batch import iter_batches, stamp
from sparklog.records.compression import CompressionType

KEY_BYTES = 10
VALUE_BYTES = 100
MAX_BATCH_BYTES = 1 << 20
NOW_MS = 1_700_000_000_000
CODECS = (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD)


def make_records(n: int, seed: int = 7) -> pa.RecordBatch:
    """n records: 10-byte keys, 100-byte hex-text values (compress about 2:1), ms timestamps."""
    rng = np.random.default_rng(seed)
    key_text = np.char.encode(np.char.zfill(rng.integers(0, 10**9, n).astype("U9"), 9), "ascii")
    keys = np.frombuffer(b"k" * n, dtype=np.uint8).reshape(n, 1)
    keys = np.hstack([keys, key_text.view(np.uint8).reshape(n, 9)])
    hex_digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    values = hex_digits[rng.integers(0, 16, n * VALUE_BYTES)]
    timestamps = NOW_MS + np.arange(n, dtype=np.int64) // 1000  # 1,000 records per ms
    return pa.RecordBatch.from_arrays(
        [
            _fixed_binary(keys.reshape(-1), KEY_BYTES),
            _fixed_binary(values, VALUE_BYTES),
            pa.array(timestamps),
        ],
        ["key", "value", "timestamp"],
    )


def _fixed_binary(data: np.ndarray, width: int) -> pa.Array:
    n = len(data) // width
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    )


def aiokafka_codec():
    """aiokafka's batch builder, batch reader and MemoryRecords, insisting on the C extension."""
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from aiokafka.record.memory_records import MemoryRecords

    for cls in (DefaultRecordBatch, DefaultRecordBatchBuilder, MemoryRecords):
        if "_crecords" not in cls.__module__:
            sys.exit(f"aiokafka's C extension is not in use ({cls.__module__}); not comparable")
    return DefaultRecordBatchBuilder, DefaultRecordBatch, MemoryRecords


# ----------------------------------------------------------------------------- the two ways


def sparklog_encode(records: pa.RecordBatch, codec: CompressionType) -> list[bytes]:
    return build_batches(records, now_ms=NOW_MS, compression=codec, max_batch_bytes=MAX_BATCH_BYTES)


def aiokafka_encode(records: pa.RecordBatch, codec: CompressionType) -> list[bytes]:
    builder_cls = aiokafka_codec()[0]
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    timestamps = records.column("timestamp").to_pylist()
    out = []
    builder = builder_cls(2, int(codec), 0, -1, -1, -1, MAX_BATCH_BYTES)
    offset = 0
    for key, value, ts in zip(keys, values, timestamps, strict=True):
        if builder.append(offset, ts, key, value, []) is None:  # full: start the next batch
            out.append(bytes(builder.build()))
            builder = builder_cls(2, int(codec), 0, -1, -1, -1, MAX_BATCH_BYTES)
            offset = 0
            builder.append(offset, ts, key, value, [])
        offset += 1
    out.append(bytes(builder.build()))
    return out


def sparklog_decode(buf: bytes) -> pa.RecordBatch:
    return decode_batches(buf).select(["key", "value", "offset", "timestamp"])


def aiokafka_decode(buf: bytes) -> pa.RecordBatch:
    memory_records_cls = aiokafka_codec()[2]
    keys, values, offsets, timestamps = [], [], [], []
    records = memory_records_cls(buf)  # what aiokafka's Fetcher iterates
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():  # check_crcs=True, the consumer's default (as ours)
            sys.exit("aiokafka: CRC mismatch")
        for record in batch:
            keys.append(record.key)
            values.append(record.value)
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()),
        ],
        ["key", "value", "offset", "timestamp"],
    )


@contextlib.contextmanager
def aiokafka_lz4_level(level: int):
    """Make aiokafka's C batch builder compress lz4 at `level` instead of its default 9."""
    import aiokafka.record._crecords.default_records as c_records

    default = c_records.lz4_encode
    c_records.lz4_encode = lambda payload, level_=level: default(payload, level=level_)
    try:
        yield
    finally:
        c_records.lz4_encode = default


def with_offsets(batches: list[bytes]) -> bytes:
    """The batches back to back with consecutive offsets, as a partition log holds them."""
    buf = bytearray(b"".join(batches))
    offset = 0
    for batch in iter_batches(buf):
        stamp(buf, batch.position, offset, 0)
        offset += batch.header.records_count
    return bytes(buf)


# ------------------------------------------------------------------------------- measuring


def measure(fn: Callable, *args, repeat: int) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, result) of the run with the least CPU time of `repeat`
    runs, GC paused."""
    best = None
    result = None
    for _ in range(repeat):
        result = None
        gc.collect()
        gc.disable()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            result = fn(*args)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            gc.enable()
        if best is None or cpu < best[1]:
            best = (wall, cpu)
    return best[0], best[1], result


def rates(n: int, payload_bytes: int, wall_s: float, cpu_s: float) -> dict:
    per_core_s = max(cpu_s, 1e-9)
    return {
        "wall_s": round(wall_s, 4),
        "cpu_s": round(cpu_s, 4),
        "records_per_s_per_core": round(n / per_core_s),
        "mb_per_s_per_core": round(payload_bytes / per_core_s / 1e6, 1),
    }


def bench_codecs(args: argparse.Namespace) -> dict:
    """Encode and decode with both codecs for none, lz4 and zstd."""
    records = make_records(args.records)
    n = records.num_rows
    payload = n * (KEY_BYTES + VALUE_BYTES)
    figures: dict[str, dict] = {}
    for codec in CODECS:
        name = codec.name.lower()
        row: dict[str, dict | float] = {}
        for side, encode in (("sparklog", sparklog_encode), ("aiokafka", aiokafka_encode)):
            wall, cpu, batches = measure(encode, records, codec, repeat=args.repeat)
            row[f"encode_{side}"] = rates(n, payload, wall, cpu) | {"batches": len(batches)}
        if codec == CompressionType.LZ4:
            # aiokafka compresses lz4 at level 9 (HC, Kafka's broker default) and sparklog at
            # lz4's fast default: the ratio compares the same level, both figures are kept.
            row["encode_aiokafka_lz4_level9"] = row["encode_aiokafka"]
            with aiokafka_lz4_level(0):
                wall, cpu, batches = measure(aiokafka_encode, records, codec, repeat=args.repeat)
            row["encode_aiokafka"] = rates(n, payload, wall, cpu) | {"batches": len(batches)}
        buf = with_offsets(sparklog_encode(records, codec))
        expected = None
        for side, decode in (("sparklog", sparklog_decode), ("aiokafka", aiokafka_decode)):
            wall, cpu, table = measure(decode, buf, repeat=args.repeat)
            row[f"decode_{side}"] = rates(n, payload, wall, cpu)
            if expected is None:
                expected = table
            elif not all(table.column(i).equals(expected.column(i)) for i in range(4)):
                sys.exit(f"{name}: sparklog and aiokafka decoded different records")
        for step in ("encode", "decode"):
            row[f"{step}_ratio"] = _ratio(row[f"{step}_aiokafka"], row[f"{step}_sparklog"])
        if codec == CompressionType.LZ4:
            row["encode_ratio_vs_lz4_level9"] = _ratio(
                row["encode_aiokafka_lz4_level9"], row["encode_sparklog"]
            )
        figures[name] = row
        report(name, n, row)
    return {
        "records": n,
        "record_bytes": KEY_BYTES + VALUE_BYTES,
        "max_batch_bytes": MAX_BATCH_BYTES,
        "codecs": figures,
        "encode_ratio": min(row["encode_ratio"] for row in figures.values()),
        "decode_ratio": min(row["decode_ratio"] for row in figures.values()),
    }


def _ratio(theirs: dict, ours: dict) -> float:
    return round(theirs["cpu_s"] / max(ours["cpu_s"], 1e-9), 2)


def report(codec: str, n: int, row: dict) -> None:
    for step in ("encode", "decode"):
        ours, theirs = row[f"{step}_sparklog"], row[f"{step}_aiokafka"]
        print(
            f"{codec:>5} {step}: sparklog {ours['records_per_s_per_core'] / 1e6:6.2f} M rec/s "
            f"{ours['mb_per_s_per_core']:7.1f} MB/s | aiokafka "
            f"{theirs['records_per_s_per_core'] / 1e6:6.2f} M rec/s "
            f"{theirs['mb_per_s_per_core']:7.1f} MB/s | ratio {row[f'{step}_ratio']:.2f}x",
            flush=True,
        )
    if "encode_aiokafka_lz4_level9" in row:
        theirs = row["encode_aiokafka_lz4_level9"]
        print(
            f"{'':>5}   (aiokafka at its default lz4 level 9: "
            f"{theirs['records_per_s_per_core'] / 1e6:.2f} M rec/s, sparklog "
            f"{row['encode_ratio_vs_lz4_level9']:.2f}x)",
            flush=True,
        )


# Each section takes the parsed arguments and returns keys for the JSON result.
def bench_log_append(args: argparse.Namespace) -> dict:
    """Appends against a raw sequential write of the same bytes to a file in the same
    directory, in the same run (fsync off): `append_ratio` is `LogSegment.append` (write and
    index, what the issue's target names); `leader_append_ratio` the whole leader path
    (`Log.append_as_leader`: CRC, a walk of every record, offsets, producer state, write)."""
    import os
    import shutil
    import tempfile

    from sparklog.records.batch import read_header
    from sparklog.storage.config import LogConfig
    from sparklog.storage.log import Log
    from sparklog.storage.segment import LogSegment

    batches = sparklog_encode(make_records(args.records), CompressionType.LZ4)
    total = sum(len(b) for b in batches)
    stamped, offset = [], 0
    for b in batches:  # offsets as a leader assigns them, for the segment append
        batch = bytearray(b)
        stamp(batch, 0, offset, 0)
        header = read_header(batch)
        stamped.append((bytes(batch), [header]))
        offset = header.next_offset
    root = tempfile.mkdtemp(prefix="bench-append-")
    best = {"raw": float("inf"), "segment": float("inf"), "leader": float("inf")}
    config = LogConfig()
    try:
        for attempt in range(args.repeat):
            raw_path = os.path.join(root, f"raw-{attempt}.bin")
            started = time.perf_counter()
            fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for b in batches:
                os.write(fd, b)
            os.close(fd)
            best["raw"] = min(best["raw"], time.perf_counter() - started)
            directory = os.path.join(root, f"s-{attempt}")
            os.makedirs(directory)
            segment = LogSegment(Path(directory), 0, config, created_ms=0)
            started = time.perf_counter()
            for data, headers in stamped:
                segment.append(data, headers)
            best["segment"] = min(best["segment"], time.perf_counter() - started)
            segment.close()
            now_ms = int(time.time() * 1000)
            log = Log.open(os.path.join(root, f"t-{attempt}"), config, now_ms=now_ms)
            started = time.perf_counter()
            for b in batches:
                log.append_as_leader(b, leader_epoch=0, now_ms=now_ms)
            best["leader"] = min(best["leader"], time.perf_counter() - started)
            log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rate = {k: total / v / 1e6 for k, v in best.items()}
    print(
        f"segment append: {rate['segment']:,.0f} MB/s, leader append: {rate['leader']:,.0f} MB/s, "
        f"raw sequential write {rate['raw']:,.0f} MB/s ({len(batches)} lz4 batches of ~1 MiB, "
        f"fsync off): ratios {rate['segment'] / rate['raw']:.2f} and "
        f"{rate['leader'] / rate['raw']:.2f}"
    )
    return {
        "append_mb_s": rate["segment"],
        "leader_append_mb_s": rate["leader"],
        "raw_write_mb_s": rate["raw"],
        "append_ratio": rate["segment"] / rate["raw"],
        "leader_append_ratio": rate["leader"] / rate["raw"],
    }


SECTIONS: list[Callable[[argparse.Namespace], dict]] = [bench_codecs, bench_log_append]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    parser.add_argument("--json", metavar="FILE", help="write the figures as one JSON object")
    args = parser.parse_args(argv)
    print(
        f"{args.records:,} records ({KEY_BYTES} B keys, {VALUE_BYTES} B values), batches of "
        f"~{MAX_BATCH_BYTES >> 20} MiB, best of {args.repeat}; rates per core (CPU time)"
    )
    result: dict = {}
    for section in SECTIONS:
        result.update(section(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


if __name__ == "__main__":
    main()
