"""Benchmark: what one hostile connection costs every other client of a broker.

One broker (`python -m sparklog serve --master none`, its own process). A bystander
confluent-kafka producer (acks=1, linger.ms=0) sends one 100-byte record every `--interval-ms`
and measures each delivery report's latency; meanwhile one hostile connection sends raw Kafka
frames back to back (the next as soon as the last is answered):

  baseline          no hostile client
  metadata          Metadata v12 naming `--entries` topics (none exists, no auto-creation)
  fetch_partitions  Fetch v12 of `--entries` partitions of the bystander's topic
  fetch_topics      Fetch v12 of partition 0 of `--entries` topics
  list_offsets      ListOffsets v7 (latest) of `--entries` partitions of the bystander's topic

Each phase prints the bystander's p50/p99/max delivery latency and how many hostile requests
were answered (and their mean seconds). Then `partial_frames`: `--partial-connections`
connections each send the 4-byte size of a 100 MiB request and 1 KiB of it; the broker's RSS
growth is printed while they stay open and after they closed.

Usage: .venv/bin/python jobs/bench_fairness.py [--phase-s 8] [--entries 100000]
       [--phases metadata,fetch_topics] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broker  # noqa: E402

from sparklog.protocol import codec, kio_build  # noqa: E402

TOPIC = "bystander"
PHASES = ("baseline", "metadata", "fetch_partitions", "fetch_topics", "list_offsets")
_INT32 = struct.Struct(">i")


def hostile_frame(phase: str, entries: int) -> bytes:
    """The request the hostile connection repeats in `phase`."""
    if phase == "metadata":
        schema = codec.request_schema(3, 12)
        data: dict[str, Any] = {
            "topics": [
                {"name": f"no-such-topic-{i:07d}", "topic_id": None} for i in range(entries)
            ],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
    elif phase in ("fetch_partitions", "fetch_topics"):
        schema = codec.request_schema(1, 12)

        def partition(index: int) -> dict[str, Any]:
            return {
                "partition": index,
                "current_leader_epoch": -1,
                "fetch_offset": 0,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": 1024,
            }

        if phase == "fetch_partitions":
            topics = [{"topic": TOPIC, "partitions": [partition(i) for i in range(entries)]}]
        else:
            topics = [{"topic": f"t{i:07d}", "partitions": [partition(0)]} for i in range(entries)]
        data = {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": topics,
            "forgotten_topics_data": [],
            "rack_id": "",
        }
    elif phase == "list_offsets":
        schema = codec.request_schema(2, 7)
        parts = [
            {"partition_index": i, "current_leader_epoch": -1, "timestamp": -1}
            for i in range(entries)
        ]
        data = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": TOPIC, "partitions": parts}],
        }
    else:
        raise ValueError(phase)
    return codec.encode_request(kio_build.build(schema, data), 1, "hostile")


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("broker closed the hostile connection")
        got += n
    return bytes(buf)


class Hostile(threading.Thread):
    """Sends `frame` again as soon as the broker answered the last one."""

    def __init__(self, bootstrap: str, frame: bytes) -> None:
        super().__init__(daemon=True)
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.frame = frame
        self.stop = threading.Event()
        self.answered = 0
        self.seconds: list[float] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                self.sock.sendall(self.frame)
                (size,) = _INT32.unpack(_recv_exactly(self.sock, 4))
                _recv_exactly(self.sock, size)
                self.seconds.append(time.perf_counter() - started)
                self.answered += 1
        except OSError:
            pass


def bystander_latencies(bootstrap: str, seconds: float, interval_ms: float) -> list[float]:
    """Delivery latencies (ms) of one record every `interval_ms` for `seconds`."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, **bench_broker.LIBRDKAFKA, "acks": "1", "linger.ms": 0}
    )
    producer.produce(TOPIC, b"warm")
    producer.flush(30)
    latencies: list[float] = []
    value = b"x" * 100

    def done(err: Any, _msg: Any, sent: float) -> None:
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    deadline = time.perf_counter() + seconds
    next_send = time.perf_counter()
    while time.perf_counter() < deadline:
        sent = time.perf_counter()
        producer.produce(TOPIC, value, on_delivery=lambda e, m, s=sent: done(e, m, s))
        next_send += interval_ms / 1000
        while (wait_s := next_send - time.perf_counter()) > 0:
            producer.poll(wait_s)
    producer.flush(120)
    return latencies


def run_phase(broker: Any, phase: str, args: argparse.Namespace) -> dict[str, Any]:
    hostile = None
    if phase != "baseline":
        hostile = Hostile(broker.bootstrap, hostile_frame(phase, args.entries))
        hostile.start()
        time.sleep(0.5)
    try:
        latencies = bystander_latencies(broker.bootstrap, args.phase_s, args.interval_ms)
    finally:
        if hostile is not None:
            hostile.stop.set()
            hostile.sock.close()
            hostile.join(60)
    figures: dict[str, Any] = {
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "max_ms": float(max(latencies)),
        "records": len(latencies),
    }
    if hostile is not None:
        figures["hostile_answered"] = hostile.answered
        figures["hostile_mean_s"] = float(np.mean(hostile.seconds)) if hostile.seconds else None
    print(
        f"{phase:17s} bystander p50 {figures['p50_ms']:8.1f} ms  p99 {figures['p99_ms']:8.1f} ms"
        f"  max {figures['max_ms']:8.1f} ms  ({len(latencies)} records)"
        + (
            f"  hostile: {figures['hostile_answered']} answered, "
            f"{figures['hostile_mean_s'] or float('nan'):.2f} s each"
            if hostile is not None
            else ""
        ),
        flush=True,
    )
    return figures


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def partial_frames(broker: Any, connections: int) -> dict[str, float]:
    """RSS growth while `connections` connections each declared 100 MiB and sent 1 KiB."""
    host, port = broker.bootstrap.rsplit(":", 1)
    before = rss_mb(broker.proc.pid)
    socks = []
    for _ in range(connections):
        s = socket.create_connection((host, int(port)))
        s.sendall(_INT32.pack(100 << 20) + b"\0" * 1024)
        socks.append(s)
    time.sleep(2)
    held = rss_mb(broker.proc.pid)
    for s in socks:
        s.close()
    time.sleep(2)
    after = rss_mb(broker.proc.pid)
    figures = {"rss_before_mb": before, "rss_held_mb": held, "rss_after_close_mb": after}
    print(
        f"partial_frames    {connections} x 100 MiB declared, 1 KiB sent: RSS {before:.0f} -> "
        f"{held:.0f} MB while open, {after:.0f} MB 2 s after closing",
        flush=True,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--phase-s", type=float, default=8.0, help="seconds per phase")
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--interval-ms", type=float, default=5.0, help="bystander send interval")
    parser.add_argument("--partial-connections", type=int, default=20, help="0: skip")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    out: dict[str, Any] = {"entries": args.entries}
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        broker = bench_broker.Broker(Path(tmp), None)
        try:
            bench_broker.create_topic(broker.bootstrap, TOPIC)
            for phase in args.phases.split(","):
                out[phase] = run_phase(broker, phase, args)
            if args.partial_connections:
                out["partial_frames"] = partial_frames(broker, args.partial_connections)
        finally:
            broker.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
