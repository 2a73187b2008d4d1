"""Benchmark: how sparklog's costs grow with the number of partitions and the data on disk.

Each cell starts `python -m sparklog serve --master none` (controller, coordinators and brokers
in one process, as `bench_vs_kafka` does; with `--broker-processes` the three-broker cells run
each broker in a child process of its own, as Spark executors do) on a fresh data dir and
measures:

  partitions   one broker with 1, 100, 1,000 and 5,000 partitions in one topic (RF=1), and
               three brokers RF=3 up to 1,000: produce MB/s (confluent-kafka, acks=all, lz4,
               100-byte values with 10,000 keys, so every partition gets data, at librdkafka's
               default linger.ms: more partitions mean smaller batches; once with librdkafka's
               default max.in.flight and once with 5, as Kafka's Java producer), broker RSS after the load,
               the Metadata response for the topic (bytes, median latency of raw v12 requests)
               and the restart time: SIGKILL, start again on the same dirs, time until every
               partition has a leader in Metadata (controller replay + brokers' log loading).
  recovery     one broker, one partition holding 1 GB (and more with --recovery-gb): restart
               time after a clean stop (SIGTERM: nothing past the recovery point is scanned)
               and after SIGKILL (only the unflushed tail is scanned, as Kafka does).

Ratios that show growth, e.g. `restart_s_per_1000_partitions`, and every raw figure go to
`--json`; `--plots DIR` draws one PNG per curve (matplotlib, `pip install matplotlib`).

Usage: .venv/bin/python jobs/bench_scale.py [--partitions 1,100,1000,5000]
       [--rf3-partitions 1,100,1000] [--broker-processes] [--recovery-gb 1] [--produce-s 5]
       [--json F] [--plots DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sparklog.cli.serve import descendants
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey

LIBRDKAFKA = {"broker.address.family": "v4"}
VALUE = b"v" * 100
IN_FLIGHT_5 = {"max.in.flight.requests.per.connection": 5}


class Serve:
    """One `sparklog serve --master none` process on `data_dir` (kept across restarts)."""

    def __init__(self, data_dir: str, brokers: int, processes: bool = False) -> None:
        self.data_dir, self.brokers, self.processes = data_dir, brokers, processes
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""

    def start(self) -> float:
        """Start; returns seconds until it prints its bootstrap servers."""
        started = time.monotonic()
        cmd = [sys.executable, "-m", "sparklog", "serve", "--master", "none",
               "--brokers", str(self.brokers), "--data-dir", self.data_dir,
               "--config", f"default.replication.factor={self.brokers}"]  # fmt: skip
        if self.processes:
            cmd.append("--broker-processes")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("bootstrap.servers="):
                self.bootstrap = line.strip().split("=", 1)[1]
                break
        else:
            raise SystemExit("sparklog serve did not start")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        return time.monotonic() - started

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(120)
        self.proc = None

    def rss_mb(self) -> float:
        """Resident memory of `serve` and its child processes (brokers of their own)."""
        assert self.proc is not None
        total = 0
        for pid in {self.proc.pid, *descendants(self.proc.pid)}:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total / 1024


def metadata(bootstrap: str, topic: str, version: int = 12) -> tuple[Any, int, float]:
    """(response, response frame bytes, seconds) of one raw Metadata request for `topic`."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    schema = codec.request_schema(ApiKey.METADATA, version)
    body = kio_build.build(
        schema,
        {
            "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    frame = codec.encode_request(body, 1, "bench-scale")  # size-prefixed
    with socket.create_connection((host, int(port)), timeout=60) as s:
        started = time.perf_counter()
        s.sendall(frame)
        size = struct.unpack(">i", _read(s, 4))[0]
        raw = _read(s, size)
        elapsed = time.perf_counter() - started
    _, response = codec.decode_response(raw, ApiKey.METADATA, version)
    return response, size + 4, elapsed


def _read(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float = 600) -> float:
    """Seconds until Metadata names a leader for every partition of `topic`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            response, _, _ = metadata(bootstrap, topic)
            parts = response.topics[0].partitions if response.topics else []
            if len(parts) == partitions and all(int(p.leader_id) >= 0 for p in parts):
                return time.monotonic() - started
        except (OSError, ConnectionError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"{topic}: not every partition had a leader within {timeout_s} s")


def wait_for_full_isr(bootstrap: str, topic: str, rf: int, timeout_s: float = 600) -> float:
    """Seconds until every partition of `topic` has all `rf` replicas in its ISR."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        response, _, _ = metadata(bootstrap, topic)
        parts = response.topics[0].partitions if response.topics else []
        if parts and all(len(p.isr_nodes) == rf for p in parts):
            return time.monotonic() - started
        time.sleep(0.1)
    raise SystemExit(f"{topic}: the ISRs did not fill within {timeout_s} s")


def create_topic(bootstrap: str, partitions: int, rf: int) -> str:
    """Create the topic and wait until every partition has a leader and a full ISR (so acks=all
    waits for every replica from the first record)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"scale-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **LIBRDKAFKA})
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(300)
    wait_for_leaders(bootstrap, name, partitions)
    wait_for_full_isr(bootstrap, name, rf)
    return name


def produce(
    bootstrap: str,
    topic: str,
    seconds: float,
    value: bytes,
    max_bytes: float = float("inf"),
    **settings: Any,
) -> dict:
    """acks=all lz4 produce for `seconds` (or until `max_bytes` of values), keyed records
    spread over every partition by librdkafka's murmur2 partitioner at its default linger.ms
    (`settings` overrides librdkafka settings): MB/s of values."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, **LIBRDKAFKA, "acks": "all",
         "partitioner": "murmur2_random", "compression.type": "lz4",
         "queue.buffering.max.kbytes": 262144, **settings}
    )  # fmt: skip
    keys = [b"key-%d" % i for i in range(10_000)]
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds and sent * len(value) < max_bytes:
        for key in keys[sent % 10 :: 10]:
            try:
                producer.produce(topic, value, key)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.monotonic() - started
    return {"mb_s": sent * len(value) / elapsed / 1e6, "records": sent, "unflushed": left}


def partitions_cell(n: int, brokers: int, seconds: float, processes: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as d:
        serve = Serve(d, brokers, processes)
        serve.start()
        try:
            started = time.monotonic()
            topic = create_topic(serve.bootstrap, n, brokers)
            create_s = time.monotonic() - started
            # librdkafka's default max.in.flight is 1,000,000; Kafka's Java producer (and any
            # idempotent producer) keeps 5, which lets batches grow while acks=all waits.
            bounded = produce(serve.bootstrap, topic, seconds, VALUE, **IN_FLIGHT_5)
            load = produce(serve.bootstrap, topic, seconds, VALUE)
            rss = serve.rss_mb()
            latencies, size = [], 0
            for _ in range(7):
                _, size, elapsed = metadata(serve.bootstrap, topic)
                latencies.append(elapsed)
            serve.stop(signal.SIGKILL)
            start_s = serve.start()
            restart_s = start_s + wait_for_leaders(serve.bootstrap, topic, n)
        finally:
            serve.stop()
    cell = {
        "partitions": n,
        "brokers": brokers,
        "broker_processes": processes,
        "create_topic_s": create_s,
        "produce_mb_s": load["mb_s"],
        "produce_mb_s_in_flight_5": bounded["mb_s"],
        "rss_mb": rss,
        "metadata_bytes": size,
        "metadata_ms": statistics.median(latencies) * 1000,
        "restart_s": restart_s,
    }
    print(
        f"  {brokers} broker(s){' in processes' if processes else ''}, {n:>5} partitions: "
        f"produce {cell['produce_mb_s']:6.1f} MB/s "
        f"({cell['produce_mb_s_in_flight_5']:6.1f} with 5 in flight), "
        f"RSS {rss:6.0f} MB, Metadata {size:>8,} B in {cell['metadata_ms']:6.2f} ms, "
        f"create {create_s:5.2f} s, restart after SIGKILL {restart_s:5.2f} s",
        flush=True,
    )
    return cell


def recovery_cell(gigabytes: float) -> dict:
    """Fill one partition with `gigabytes` of 1 MB-batched records, then time restarts."""
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:
        serve = Serve(d, 1)
        serve.start()
        try:
            topic = create_topic(serve.bootstrap, 1, 1)
            target = gigabytes * 1e9
            written = 0
            value = os.urandom(10_000)  # incompressible: bytes on disk = bytes produced
            while written < target:
                load = produce(serve.bootstrap, topic, 30, value, target - written)
                written += load["records"] * len(value)
            serve.stop(signal.SIGTERM)
            clean_s = serve.start() + wait_for_leaders(serve.bootstrap, topic, 1)
            time.sleep(1)
            serve.stop(signal.SIGKILL)
            unclean_s = serve.start() + wait_for_leaders(serve.bootstrap, topic, 1)
        finally:
            serve.stop()
    cell = {"gb": written / 1e9, "clean_restart_s": clean_s, "unclean_restart_s": unclean_s}
    print(
        f"  {cell['gb']:.1f} GB in one partition: restart after SIGTERM {clean_s:.2f} s, "
        f"after SIGKILL {unclean_s:.2f} s",
        flush=True,
    )
    return cell


def growth(cells: list[dict], key: str) -> float:
    """How `key` grows from the smallest to the largest cell, per partition added, relative to
    linear: 1.0 is linear, above 1 faster than linear (from the last two cells' slope)."""
    if len(cells) < 3:
        return float("nan")
    (a, b, c) = cells[0], cells[-2], cells[-1]
    first = (b[key] - a[key]) / max(b["partitions"] - a["partitions"], 1)
    last = (c[key] - b[key]) / max(c["partitions"] - b["partitions"], 1)
    return last / first if first > 0 else float("nan")


def plot(result: dict, directory: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    curves = [
        ("produce_mb_s", "produce MB/s (acks=all, lz4, 100 B)"),
        ("produce_mb_s_in_flight_5", "produce MB/s, max.in.flight=5 (acks=all, lz4, 100 B)"),
        ("rss_mb", "broker process RSS after the load (MB)"),
        ("metadata_ms", "Metadata latency for the topic (ms)"),
        ("metadata_bytes", "Metadata response size (bytes)"),
        ("restart_s", "restart after SIGKILL until every leader is back (s)"),
    ]
    for key, title in curves:
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        for label, cells in (("1 broker, RF=1", result["one_broker"]),
                             ("3 brokers, RF=3", result["three_brokers"])):  # fmt: skip
            if cells:
                ax.plot([c["partitions"] for c in cells], [c[key] for c in cells], "o-",
                        label=label)  # fmt: skip
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("partitions")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / f"scale-{key.replace('_', '-')}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(str(path))
    return written


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=ints, default=[1, 100, 1000, 5000])
    parser.add_argument("--rf3-partitions", type=ints, default=[1, 100, 1000])
    parser.add_argument("--broker-processes", action="store_true",
                        help="three-broker cells: each broker in a process of its own")  # fmt: skip
    parser.add_argument("--recovery-gb", type=lambda t: [float(x) for x in t.split(",") if x],
                        default=[1.0])  # fmt: skip
    parser.add_argument("--produce-s", type=float, default=5.0)
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--plots", help="write one PNG per curve into this directory")
    args = parser.parse_args()
    print("partitions (sparklog serve --master none, fresh dirs per cell):", flush=True)
    one = [partitions_cell(n, 1, args.produce_s) for n in args.partitions]
    three = [
        partitions_cell(n, 3, args.produce_s, args.broker_processes) for n in args.rf3_partitions
    ]
    print("recovery:", flush=True)
    recovery = [recovery_cell(gb) for gb in args.recovery_gb]
    result: dict[str, Any] = {"one_broker": one, "three_brokers": three, "recovery": recovery}
    for key in ("rss_mb", "metadata_ms", "metadata_bytes", "restart_s", "create_topic_s"):
        result[f"{key}_growth_vs_linear"] = growth(one, key)
    if one:
        result["produce_mb_s_most_vs_fewest_partitions"] = (
            one[-1]["produce_mb_s"] / one[0]["produce_mb_s"]
        )
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}, indent=1))
    if args.json:  # before plotting: a missing matplotlib must not lose a long run's figures
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.plots:
        result["plots"] = plot(result, Path(args.plots))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
