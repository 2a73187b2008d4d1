"""Compression bombs: what one costs a broker, and the producers beside it (issue 27, item 5).

    python jobs/bench_bombs.py [--codecs zstd,gzip,lz4,snappy] [--bombs 3] [--json FILE]

Per codec, one broker in its own process (`python -m sparklog serve --master none`) and:

  baseline   a bystander producer alone: confluent-kafka, acks=1, one 100-byte record every
             5 ms to partition 1 of the topic; latency = produce() to its delivery report;
  bombs      the same bystander while `--bombs` Produce requests, back to back, each carry one
             batch whose single record's value is all zeros: small on the wire (it fits the
             default max.message.bytes), `--<codec>-mib` MiB once decompressed.

Reported per codec: the bomb's size on the wire and decompressed, each bomb's answer (error
code) and time to answer, broker RSS before the bombs, at their peak (sampled every 20 ms) and
2 s after, and the bystander's p50/p99/max in both phases. `--json FILE` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lz4.frame  # noqa: E402
import numpy as np  # noqa: E402
import zstandard  # noqa: E402

from sparklog.client import AdminClient, NewTopic  # noqa: E402
from sparklog.protocol import codec, kio_build  # noqa: E402
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey  # noqa: E402
from sparklog.records.batch import (  # noqa: E402
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    pack_header,
)
from sparklog.records.compression import CompressionType  # noqa: E402
from sparklog.records.crc import crc32c  # noqa: E402
from sparklog.records.varint import encode_varint  # noqa: E402

TOPIC = "bombs"
CHUNK = 1 << 20
MIB = 1 << 20


def _zeros(total: int):
    block = bytes(CHUNK)
    while total > 0:
        yield block[: min(total, CHUNK)]
        total -= CHUNK


def _compressed(kind: CompressionType, prefix: bytes, value_bytes: int, suffix: bytes) -> bytes:
    """The records section `prefix + zeros + suffix` compressed as Kafka's wire format, without
    ever holding the decompressed bytes."""
    pieces = [prefix, *_zeros(value_bytes), suffix]
    if kind == CompressionType.GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(c.compress(p) for p in pieces) + c.flush()
    if kind == CompressionType.ZSTD:
        c = zstandard.ZstdCompressor(level=3).compressobj()
        return b"".join(c.compress(p) for p in pieces) + c.flush()
    if kind == CompressionType.LZ4:
        c = lz4.frame.LZ4FrameCompressor(
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False
        )
        return c.begin() + b"".join(c.compress(p) for p in pieces) + c.flush()
    if kind == CompressionType.SNAPPY:  # xerial framing, one raw block of it all (21:1 at most)
        import cramjam

        block = bytes(cramjam.snappy.compress_raw(b"".join(pieces)))
        return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block
    raise ValueError(kind)


def bomb_batch(kind: CompressionType, value_bytes: int) -> bytes:
    """A v2 batch of one record whose value is `value_bytes` zeros, compressed with `kind`."""
    now = int(time.time() * 1000)
    head = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1)
    head += encode_varint(value_bytes)
    suffix = encode_varint(0)
    body_bytes = len(head) + value_bytes + len(suffix)
    payload = _compressed(kind, encode_varint(body_bytes) + head, value_bytes, suffix)
    header = BatchHeader(0, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, MAGIC, 0, int(kind),
                         0, now, now, -1, -1, -1, 1)  # fmt: skip
    raw = bytearray(pack_header(header)) + payload
    raw[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]).to_bytes(
        4, "big"
    )
    return bytes(raw)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Bystander:
    """A confluent-kafka producer sending one small record every 5 ms to partition 1."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "linger.ms": 0,
                "message.timeout.ms": 120000,
            }
        )
        self.latencies_ms: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.perf_counter()

            def done(err, _msg, sent=sent) -> None:
                if err is not None:
                    self.errors += 1
                self.latencies_ms.append((time.perf_counter() - sent) * 1000)

            self.producer.produce(TOPIC, b"x" * 100, partition=1, on_delivery=done)
            self.producer.poll(0.005)

    def __enter__(self) -> Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(120)

    def figures(self) -> dict[str, float]:
        ms = np.asarray(self.latencies_ms)
        p50, p99, worst = np.percentile(ms, [50, 99, 100]) if len(ms) else (np.nan,) * 3
        return {"p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(worst),
                "records": len(ms), "errors": self.errors}  # fmt: skip


async def send_bombs(host: str, port: int, data: bytes, count: int) -> list[dict[str, Any]]:
    from sparklog.protocol.async_client import AsyncKafkaConnection

    conn = await AsyncKafkaConnection(host, port, client_id="bomber").connect()
    out = []
    try:
        version = conn.version_for(ApiKey.PRODUCE, BROKER_APIS[ApiKey.PRODUCE])
        for _ in range(count):
            body = kio_build.build(
                codec.request_schema(ApiKey.PRODUCE, version),
                {"transactional_id": None, "acks": 1, "timeout": 120_000,
                 "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": data}]}]},
            )  # fmt: skip
            start = time.perf_counter()
            response = await conn.request(body, timeout_s=300)
            answer = response.responses[0].partition_responses[0]
            out.append({"seconds": round(time.perf_counter() - start, 3),
                        "error_code": int(answer.error_code),
                        "error_message": answer.error_message})  # fmt: skip
    finally:
        await conn.close()
    return out


def one_codec(kind: CompressionType, mib: int, args: argparse.Namespace) -> dict[str, Any]:
    built = time.perf_counter()
    data = bomb_batch(kind, mib * MIB)
    report: dict[str, Any] = {"wire_bytes": len(data), "decompressed_mib": mib,
                              "build_s": round(time.perf_counter() - built, 2)}  # fmt: skip
    data_dir = tempfile.mkdtemp(prefix="sparklog-bench-bombs-")
    broker = subprocess.Popen(
        [sys.executable, "-m", "sparklog", "serve", "--master", "none", "--data-dir", data_dir,
         *sum((["--config", c] for c in args.config), [])],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline().strip()
        if not line.startswith("bootstrap.servers="):
            raise RuntimeError(f"the broker did not start: {line!r}")
        bootstrap = line.split("=", 1)[1]
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 2, 1)])
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        with Bystander(bootstrap) as alone:
            time.sleep(args.seconds)
        report["bystander_alone"] = alone.figures()
        time.sleep(1)
        report["rss_before_mb"] = round(rss_mb(broker.pid), 1)
        peak = [report["rss_before_mb"]]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.02):
                peak.append(rss_mb(broker.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with Bystander(bootstrap) as beside:
            time.sleep(0.5)
            report["bombs"] = asyncio.run(send_bombs(host, int(port), data, args.bombs))
            time.sleep(0.5)
        sampling.set()
        sampler.join()
        report["bystander_during_bombs"] = beside.figures()
        time.sleep(2)
        report["rss_peak_mb"] = round(max(peak), 1)
        report["rss_after_mb"] = round(rss_mb(broker.pid), 1)
    finally:
        broker.terminate()
        broker.wait(60)
        shutil.rmtree(data_dir, ignore_errors=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codecs", default="zstd,gzip,lz4,snappy")
    parser.add_argument("--bombs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="baseline phase length")
    parser.add_argument("--zstd-mib", type=int, default=2000)
    parser.add_argument("--gzip-mib", type=int, default=200)
    parser.add_argument("--lz4-mib", type=int, default=200)
    parser.add_argument("--snappy-mib", type=int, default=16)
    parser.add_argument("--config", action="append", default=[], metavar="K=V")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    for name in args.codecs.split(","):
        kind = CompressionType.from_name(name)
        report[name] = one_codec(kind, getattr(args, f"{name}_mib"), args)
        print(name, json.dumps(report[name], default=str), flush=True)
    report["settings"] = vars(args) | {"json": None}
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
