"""Storage demo: write and read a partition log on local disk and say what happened.

It builds 200,000 records as Arrow arrays, encodes them into
Kafka v2 batches (lz4), appends them to a partition log with small segments, reads everything
back into Arrow, checks keys, values and offsets, reopens the log as after a crash, and prints
a short summary. The Spark quickstart (`jobs/quickstart.py`, what `make demo` runs) tells the same story with DataFrames.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from sparklog.records.arrow_codec import build_batches, decode_batches
from sparklog.records.compression import CompressionType
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log


def now_ms() -> int:
    return int(time.time() * 1000)


def make_table(rows: int) -> pa.Table:
    keys = pa.array([b"user-%05d" % (i % 10_000) for i in range(rows)], pa.binary())
    values = pa.array([b"event %d payload " % i + b"x" * 64 for i in range(rows)], pa.binary())
    return pa.table({"key": keys, "value": values})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dir", default=None, help="data dir (default: a temp dir, removed)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="sparklog-quickstart-"))
    directory = root / "quickstart-0"
    config = LogConfig.from_properties({"segment.bytes": 8 * 1024 * 1024})
    try:
        table = make_table(args.rows)
        print(f"sparklog quickstart: {args.rows:,} records -> partition log in {directory}")

        started = time.perf_counter()
        batches = build_batches(table, now_ms=now_ms(), compression=CompressionType.LZ4)
        encoded_s = time.perf_counter() - started
        log = Log.open(directory, config, now_ms=now_ms())
        started = time.perf_counter()
        for raw in batches:
            log.append_as_leader(raw, leader_epoch=0, now_ms=now_ms())
        log.update_high_watermark(log.log_end_offset)
        appended_s = time.perf_counter() - started
        size = log.size_in_bytes
        print(
            f"  encoded {len(batches)} lz4 batches in {encoded_s:.2f}s, appended in "
            f"{appended_s:.2f}s: offsets 0..{log.log_end_offset - 1}, {len(log.segments)} segments, "
            f"{size / 1e6:.1f} MB on disk"
        )

        started = time.perf_counter()
        parts = []
        offset = 0
        while offset < log.high_watermark:
            chunk = decode_batches(log.read(offset, 4 * 1024 * 1024).records)
            parts.append(chunk)
            offset = chunk.column("offset")[-1].as_py() + 1
        read = pa.Table.from_batches(parts)
        read_s = time.perf_counter() - started
        assert read.num_rows == args.rows, (read.num_rows, args.rows)
        assert np.array_equal(read.column("offset").to_numpy(), np.arange(args.rows))
        assert read.column("key").equals(table.column("key"))
        assert read.column("value").equals(table.column("value"))
        mb = (table.column("value").nbytes + table.column("key").nbytes) / 1e6
        print(
            f"  read back {read.num_rows:,} records into Arrow in {read_s:.2f}s ({mb / read_s:.0f} MB/s): keys, values, offsets match"
        )

        middle = log.fetch_offset_by_timestamp(0)
        log.close()
        reopened = Log.open(directory, config, now_ms=now_ms())
        assert reopened.log_end_offset == args.rows
        print(
            f"  reopened: log end offset {reopened.log_end_offset}, first offset by timestamp {middle[0]}, "
            f"leader epochs {[(e.epoch, e.start_offset) for e in reopened.epoch_cache.entries()]}"
        )
        reopened.close()
        print("quickstart OK")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
