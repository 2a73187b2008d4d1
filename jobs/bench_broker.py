"""Benchmark: one sparklog broker on loopback, driven by confluent-kafka and by sparklog's client.

One run, one broker in its own process (`python -m sparklog serve --master none`, so clients
and broker do not share a GIL), one topic partition per phase, 100-byte values (random A-Z, as
kafka-producer-perf-test makes them), null keys, lz4, acks=1:

  (a) ingest: confluent-kafka's Producer sends `--messages` values with `produce_batch` (lists
      of message dicts built beforehand: the Python client's fastest path; a per-call
      `produce()` loop is client-bound near 3 us per call); MB/s of values from the first call
      to the last delivery report (flush). `produce()` per record is measured too.
  (b) the sparklog producer doing the same: the bulk `send_arrow` path (Arrow chunks of
      `--arrow-chunk` rows) against produce_batch, and the per-record `send` path against
      produce() (`--send-messages` values). Both clients use batch.size=1000000 and
      linger.ms=5 (librdkafka's defaults), no idempotence.
  (c) end-to-end latency at `--rate` msgs/s for `--latency-s` seconds: produce() -> the
      consumer's poll() returns it (same process, send time in the value): confluent producer
      + consumer with librdkafka's default linger.ms=5 (the headline `e2e_*`) and with
      linger.ms=0 (a request per record: the broker's per-request cost), and the sparklog
      producer (default linger.ms=5) + consumer. Records of a first warm-up second are sent
      but not counted.
  (d) consume: everything (a) wrote, from offset 0, with confluent-kafka's Consumer
      (`consume()` in batches of 100,000, prefetch queue tuned up) and with the sparklog
      consumer's Arrow path (`poll_arrow`, max.poll.records=100000).

Each producer phase checks the topic holds every record and notes the compression the broker
stored: librdkafka (confluent-kafka) sends lz4 batches uncompressed to a broker whose
ApiVersions lists no FindCoordinator, which sparklog's does not yet.

MB = 10^6 bytes of record values. Ratios are sparklog / confluent-kafka. `--json FILE` writes
one object with every figure (`ingest_mb_s`, `producer_ratio`, `e2e_p99_ms`, `consume_ratio`,
...) and the targets. Each phase also prints the CPU seconds the broker process and this
(client) process used, which tells which side limited it.

`--profile DIR` runs the broker on its process's main thread under cProfile, switched on for
each phase only (SIGUSR1/SIGUSR2), profiles this process's main thread too, writes
`DIR/<phase>.broker.prof` / `.client.prof` and prints each one's hotspots (profiling slows
both sides: figures from a profiled run are not the benchmark's).

Usage: .venv/bin/python jobs/bench_broker.py [--messages N] [--json FILE] [--profile DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

VALUE_BYTES = 100
POOL_SIZE = 10_000  # distinct values: 1 MB, beyond lz4's 64 KiB window
MB = 1e6
TARGETS = {"ingest_mb_s": 100.0, "producer_ratio": 0.7, "e2e_p99_ms": 10.0, "consume_ratio": 1.0}
LIBRDKAFKA = {"broker.address.family": "v4"}
PRODUCER_TUNING = {"acks": "1", "compression.type": "lz4", "linger.ms": 5, "batch.size": 1_000_000}
WARMUP_S = 1.0  # (c): records sent in the first second are not counted


def value_pool(seed: int = 7) -> list[bytes]:
    rng = np.random.default_rng(seed)
    letters = rng.integers(ord("A"), ord("Z") + 1, size=(POOL_SIZE, VALUE_BYTES), dtype=np.uint8)
    return [row.tobytes() for row in letters]


# -- the broker process ------------------------------------------------------------------------


class Broker:
    """A broker (and controller) in a child process, measured (and profiled) per phase."""

    def __init__(self, data_dir: Path, profile_dir: Path | None) -> None:
        self.data_dir = data_dir
        self.profile_dir = profile_dir
        if profile_dir is None:
            cmd = [sys.executable, "-m", "sparklog", "serve", "--master", "none"]
            cmd += ["--data-dir", str(data_dir)]
        else:
            cmd = [sys.executable, __file__, "--broker-child", str(data_dir)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr)
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("bootstrap.servers="):
            self.proc.kill()
            raise SystemExit(f"the broker did not start (printed {line!r})")
        self.bootstrap = line.split("=", 1)[1]

    def stored_compression(self, topic: str) -> str:
        """The compression of the first batch the broker stored for partition 0 of `topic`
        (librdkafka may send uncompressed batches when asked for lz4)."""
        from sparklog.records.batch import read_header

        segment = self.data_dir / "broker-0" / f"{topic}-0" / f"{0:020d}.log"
        with open(segment, "rb") as f:
            return read_header(f.read(61)).compression.name.lower()

    def cpu_s(self) -> float:
        """CPU seconds the broker process used so far (user + system, all threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def measure(self, name: str, work: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
        """Run `work`; returns its result and the CPU seconds broker and client used. With
        --profile, cProfile runs in the broker (-> name.prof) and here (-> name.client.prof)."""
        import cProfile

        client = cProfile.Profile() if self.profile_dir is not None else None
        if client is not None:
            self._signal_profiler(signal.SIGUSR1, None)
            client.enable()
        broker_cpu, client_cpu = self.cpu_s(), time.process_time()
        try:
            result = work()
        finally:
            cpu = {"broker": self.cpu_s() - broker_cpu, "client": time.process_time() - client_cpu}
            if client is not None:
                client.disable()
                client.dump_stats(str(self.profile_dir / f"{name}.client.prof"))
                self._signal_profiler(signal.SIGUSR2, self.profile_dir / f"{name}.broker.prof")
        return result, cpu

    def _signal_profiler(self, sig: int, target: Path | None) -> None:
        """SIGUSR1: start the broker's profiler; SIGUSR2: dump it to `target` (and wait)."""
        assert self.profile_dir is not None
        if target is not None:
            target.unlink(missing_ok=True)
            (self.profile_dir / "next").write_text(str(target))
        self.proc.send_signal(sig)
        deadline = time.monotonic() + 30
        done = self.profile_dir / "profiling"
        while time.monotonic() < deadline:  # the child marks each switch in `profiling`
            if (target is None and done.exists()) or (target is not None and target.exists()):
                return
            time.sleep(0.02)
        raise SystemExit("the broker's profiler did not answer")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def broker_child(data_dir: Path) -> None:
    """`--broker-child`: controller in a thread, the broker's loop on this main thread under
    a cProfile switched on by SIGUSR1 and dumped (to the path in `<dir>/next`) by SIGUSR2."""
    import cProfile

    from sparklog.broker.server import BrokerServer, BrokerState
    from sparklog.controller.server import ControllerServer

    controller = ControllerServer(data_dir / "controller", config={})
    controller.start_in_thread()
    broker = BrokerServer(
        0, data_dir / "broker-0", controller.bootstrap, {"listeners": "PLAINTEXT://127.0.0.1:0"}
    )
    stop = threading.Event()
    profiler: list[cProfile.Profile] = []
    profile_dir = Path(os.environ["_BENCH_PROFILE_DIR"])

    def on_usr1(*_: object) -> None:
        profiler[:] = [cProfile.Profile()]
        profiler[0].enable()
        (profile_dir / "profiling").touch()

    def on_usr2(*_: object) -> None:
        (profile_dir / "profiling").unlink(missing_ok=True)
        if profiler:
            profiler[0].disable()
            profiler.pop().dump_stats((profile_dir / "next").read_text())

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def announce() -> None:
        while broker.state is not BrokerState.RUNNING:
            time.sleep(0.05)
        print(f"bootstrap.servers={broker.bootstrap}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        broker.run_forever(stop)
    finally:
        controller.stop()


# -- workloads ---------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str) -> str:
    from sparklog.client import AdminClient, NewTopic

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
    return name


def end_offset(bootstrap: str, topic: str) -> int:
    from sparklog.client import KafkaConsumer

    with KafkaConsumer({"bootstrap.servers": bootstrap}) as consumer:
        return consumer.end_offsets([(topic, 0)])[(topic, 0)]


def confluent_producer(bootstrap: str, **overrides: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            **LIBRDKAFKA,
            **PRODUCER_TUNING,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            **overrides,
        }
    )


def produce_confluent_batch(
    bootstrap: str, topic: str, pool: list[bytes], count: int, **overrides: Any
) -> float:
    """(a): produce_batch() over lists of 10,000 message dicts built beforehand (the Python
    client's cheapest path); seconds from the first call to the last delivery report."""
    producer = confluent_producer(bootstrap, **overrides)
    messages = [{"value": pool[i % POOL_SIZE]} for i in range(count)]
    chunks = [messages[i : i + 10_000] for i in range(0, count, 10_000)]
    failures: list[Any] = []
    on_delivery = lambda err, _m: failures.append(err) if err else None  # noqa: E731
    started = time.perf_counter()
    for chunk in chunks:
        while chunk:
            queued = producer.produce_batch(topic, chunk, on_delivery=on_delivery)
            chunk = [m for m in chunk if "_error" in m] if queued < len(chunk) else []
            producer.poll(0 if not chunk else 0.01)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - started
    assert remaining == 0 and not failures, (remaining, failures[:3])
    return elapsed


def produce_confluent_each(bootstrap: str, topic: str, pool: list[bytes], count: int) -> float:
    """(a), per record: produce() each value (what (b)'s send() compares with)."""
    producer = confluent_producer(bootstrap)
    failures: list[Any] = []
    on_delivery = lambda err, _m: failures.append(err) if err else None  # noqa: E731
    started = time.perf_counter()
    for i in range(count):
        producer.produce(topic, pool[i % POOL_SIZE], on_delivery=on_delivery)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert remaining == 0 and not failures, (remaining, failures[:3])
    return elapsed


def sparklog_producer(bootstrap: str, linger_ms: int = 5) -> Any:
    from sparklog.client import KafkaProducer

    return KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_TUNING,
            "linger.ms": linger_ms,
            "enable.idempotence": False,
            "buffer.memory": 64 * 1024 * 1024,
        }
    )


def produce_sparklog_arrow(
    bootstrap: str, topic: str, pool: list[bytes], count: int, chunk: int
) -> float:
    """(b), bulk: Arrow chunks prepared beforehand; send_arrow each, then flush."""
    values = pa.array(pool, pa.binary())
    chunks = []
    for start in range(0, count, chunk):
        rows = np.arange(start, min(count, start + chunk)) % POOL_SIZE
        chunks.append(pa.RecordBatch.from_arrays([values.take(pa.array(rows))], names=["value"]))
    with sparklog_producer(bootstrap) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        futures = [producer.send_arrow(topic, batch) for batch in chunks]
        producer.flush()
        elapsed = time.perf_counter() - started
    assert sum(m.record_count for f in futures for m in f.result()) == count
    return elapsed


def produce_sparklog_send(bootstrap: str, topic: str, pool: list[bytes], count: int) -> float:
    """(b), per record: send() each value, then flush."""
    failures: list[BaseException] = []
    on_delivery = lambda _m, err: failures.append(err) if err else None  # noqa: E731
    with sparklog_producer(bootstrap) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        for i in range(count):
            producer.send(topic, pool[i % POOL_SIZE], on_delivery=on_delivery)
        producer.flush()
        elapsed = time.perf_counter() - started
    assert not failures, failures[:3]
    return elapsed


def consume_confluent(bootstrap: str, topic: str, count: int) -> float:
    """(d): seconds to read `count` records from offset 0 with consume() batches (as many
    records per call as poll_arrow's max.poll.records). librdkafka's prefetch queue is
    raised and its back-off removed: with the defaults (100,000 messages, 1 s back-off) it
    stalls between batches and reads at half the rate."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            **LIBRDKAFKA,
            "group.id": "bench",
            "enable.auto.commit": False,
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 0,
        }
    )
    got = 0
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])
    while got < count:
        for m in consumer.consume(num_messages=min(100_000, count - got), timeout=1.0):
            assert m.error() is None, m.error()
            got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def consume_sparklog_arrow(bootstrap: str, topic: str, count: int) -> float:
    """(d): seconds to read `count` records from offset 0 with poll_arrow()."""
    from sparklog.client import KafkaConsumer

    with KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "max.poll.records": 100_000,
        }
    ) as consumer:
        got = 0
        started = time.perf_counter()
        consumer.assign([(topic, 0)])
        while got < count:
            got += consumer.poll_arrow(1000).num_rows
        return time.perf_counter() - started


# -- (c) latency -------------------------------------------------------------------------------


def paced(rate: int, seconds: float, send: Callable[[int], None], tick: Callable[[], None]) -> None:
    """Call send(i) at `rate` per second for `seconds` (late calls go at once, no catch-up
    burst beyond the schedule)."""
    interval = 1.0 / rate
    started = time.perf_counter()
    for i in range(int(rate * seconds)):
        delay = started + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)
        tick()


def stamped(i: int) -> bytes:
    """A 100-byte value carrying its send time (perf_counter ns) and sequence number."""
    head = time.perf_counter_ns().to_bytes(8, "big") + i.to_bytes(8, "big")
    return head + b"x" * (VALUE_BYTES - 16)


def collect_latencies(
    poll: Callable[[], list[bytes]], expected: int, timeout_s: float
) -> Callable[[], np.ndarray]:
    """Start a reader thread calling `poll()` for `expected` records; the returned join()
    gives the latencies in ms of the records sent after the warm-up (connections, metadata,
    the consumer's first fetch)."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s

    def read() -> None:
        while len(seen) < expected and time.monotonic() < deadline:
            values = poll()
            now = time.perf_counter_ns()  # after poll() returned them
            seen.extend(
                (int.from_bytes(v[8:16], "big"), now - int.from_bytes(v[:8], "big")) for v in values
            )

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def join(warmup: int) -> np.ndarray:
        reader.join(timeout_s)
        assert sorted(seq for seq, _ in seen) == list(range(expected)), "records lost or doubled"
        return np.array([ns for seq, ns in seen if seq >= warmup]) / 1e6

    return join


def latency_confluent(bs: str, topic: str, rate: int, seconds: float, linger_ms: int) -> np.ndarray:
    from confluent_kafka import Consumer, TopicPartition

    producer = confluent_producer(bs, **{"linger.ms": linger_ms})
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            **LIBRDKAFKA,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])

    def poll() -> list[bytes]:  # poll(), not consume(): consume() waits to fill its batch
        m = consumer.poll(0.1)
        return [m.value()] if m is not None and m.error() is None else []

    join = collect_latencies(poll, int(rate * (seconds + WARMUP_S)), seconds + 60)
    paced(
        rate,
        seconds + WARMUP_S,
        lambda i: producer.produce(topic, stamped(i)),
        lambda: producer.poll(0),
    )
    producer.flush(30)
    latencies = join(int(rate * WARMUP_S))
    consumer.close()
    return latencies


def latency_sparklog(bs: str, topic: str, rate: int, seconds: float, linger_ms: int) -> np.ndarray:
    from sparklog.client import KafkaConsumer

    consumer = KafkaConsumer({"bootstrap.servers": bs, "auto.offset.reset": "earliest"})
    consumer.assign([(topic, 0)])
    consumer.seek((topic, 0), 0)
    poll = lambda: [r.value for r in consumer.poll(100)]  # noqa: E731
    join = collect_latencies(poll, int(rate * (seconds + WARMUP_S)), seconds + 60)
    with sparklog_producer(bs, linger_ms=linger_ms) as producer:
        paced(rate, seconds + WARMUP_S, lambda i: producer.send(topic, stamped(i)), lambda: None)
        producer.flush()
    latencies = join(int(rate * WARMUP_S))
    consumer.close()
    return latencies


# -- the run -----------------------------------------------------------------------------------


def mb_s(count: int, seconds: float) -> float:
    return count * VALUE_BYTES / MB / seconds


def throughput(
    broker: Broker, out: dict[str, Any], key: str, what: str, count: int, work: Callable[[], float]
) -> float:
    """Run one throughput phase; records MB/s under `key` and the broker's MB per CPU second."""
    seconds, cpu = broker.measure(key, work)
    out[key] = mb_s(count, seconds)
    out[f"{key}_broker_cpu_s"] = cpu["broker"]
    print(
        f"{what}: {out[key]:.1f} MB/s ({count / seconds:,.0f} records/s, {count:,} in {seconds:.2f}s; "
        f"CPU s: broker {cpu['broker']:.2f}, client {cpu['client']:.2f})",
        flush=True,
    )
    return out[key]


def latency(broker: Broker, out: dict, key: str, what: str, work: Callable, expected: int) -> None:
    """Run one latency phase; records p50/p99 under `key`_p50_ms / `key`_p99_ms."""
    ms, cpu = broker.measure(key, work)
    p50, p99, worst = np.percentile(ms, [50, 99, 100]) if len(ms) else (np.nan,) * 3
    out[f"{key}_p50_ms"], out[f"{key}_p99_ms"] = float(p50), float(p99)
    print(
        f"{what}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.1f} ms ({len(ms)} of {expected} "
        f"records; CPU s: broker {cpu['broker']:.2f}, client {cpu['client']:.2f})",
        flush=True,
    )
    assert len(ms) == expected, f"{what}: {len(ms)} of {expected} records arrived"


def run(args: argparse.Namespace, broker: Broker) -> dict[str, Any]:
    bs, pool, out = broker.bootstrap, value_pool(), {}
    n, n_each, rate, secs = args.messages, args.send_messages, args.rate, args.latency_s
    topics = {p: create_topic(bs, f"bench-{p}") for p in ("a", "a-each", "b-arrow", "b-send")}
    producers = (
        ("ingest_mb_s", "(a) confluent-kafka producer, produce_batch", n,
         lambda: produce_confluent_batch(bs, topics["a"], pool, n)),
        ("ingest_each_mb_s", "(a) confluent-kafka producer, produce()", n_each,
         lambda: produce_confluent_each(bs, topics["a-each"], pool, n_each)),
        ("sparklog_arrow_mb_s", "(b) sparklog producer, send_arrow", n,
         lambda: produce_sparklog_arrow(bs, topics["b-arrow"], pool, n, args.arrow_chunk)),
        ("sparklog_send_mb_s", "(b) sparklog producer, send()", n_each,
         lambda: produce_sparklog_send(bs, topics["b-send"], pool, n_each)),
    )  # fmt: skip
    for (key, what, count, work), name in zip(producers, topics, strict=True):
        throughput(broker, out, key, what, count, work)
        assert end_offset(bs, topics[name]) == count, f"bench-{name} does not hold {count} records"
        out[f"{key}_stored_compression"] = stored = broker.stored_compression(topics[name])
        if stored != "lz4":
            print(f"    (stored as {stored}: the client did not compress; librdkafka's lz4 needs"
                  " FindCoordinator in the broker's ApiVersions)")  # fmt: skip
    out["producer_ratio"] = out["sparklog_arrow_mb_s"] / out["ingest_mb_s"]
    out["producer_send_ratio"] = out["sparklog_send_mb_s"] / out["ingest_each_mb_s"]

    for key, what, measure, linger_ms in (
        ("e2e", "confluent-kafka, linger.ms=5 (default)", latency_confluent, 5),
        ("e2e_linger0", "confluent-kafka, linger.ms=0", latency_confluent, 0),
        ("sparklog_e2e", "sparklog, linger.ms=5 (default)", latency_sparklog, 5),
    ):
        topic = create_topic(bs, f"bench-c-{key}")
        work = lambda m=measure, t=topic, lg=linger_ms: m(bs, t, rate, secs, lg)  # noqa: E731
        latency(
            broker, out, key, f"(c) e2e latency at {rate} msgs/s, {what}", work, int(rate * secs)
        )

    for key, what, work in (
        ("consume_confluent_mb_s", "(d) confluent-kafka consumer, consume()",
         lambda: consume_confluent(bs, topics["a"], n)),
        ("consume_sparklog_arrow_mb_s", "(d) sparklog consumer, poll_arrow",
         lambda: consume_sparklog_arrow(bs, topics["a"], n)),
    ):  # fmt: skip
        throughput(broker, out, key, what, n, work)
    out["consume_ratio"] = out["consume_sparklog_arrow_mb_s"] / out["consume_confluent_mb_s"]
    return out


def summarize(out: dict[str, Any]) -> None:
    print("\nsparklog / confluent-kafka:")
    print(
        f"  producer: send_arrow / produce_batch {out['producer_ratio']:.2f}x, "
        f"send() / produce() {out['producer_send_ratio']:.2f}x"
    )
    print(f"  consumer: poll_arrow / consume() {out['consume_ratio']:.2f}x")
    if out["ingest_mb_s_broker_cpu_s"] > 0:  # what one broker core could take in (a)
        out["ingest_mb_per_broker_cpu_s"] = (
            out["messages"] * VALUE_BYTES / MB / out["ingest_mb_s_broker_cpu_s"]
        )
        print(
            f"  broker: {out['ingest_mb_per_broker_cpu_s']:.0f} MB ingested per broker CPU "
            "second in (a)"
        )
    print("targets:")
    out["targets_met"] = {}
    for key, target in TARGETS.items():
        ok = out[key] <= target if key.endswith("_ms") else out[key] >= target
        out["targets_met"][key] = bool(ok)
        sign = "<=" if key.endswith("_ms") else ">="
        print(f"  {key} = {out[key]:.2f} ({sign} {target}): {'met' if ok else 'NOT met'}")


def print_hotspots(profile_dir: Path, top: int) -> None:
    for path in sorted(profile_dir.glob("*.prof")):
        buffer = io.StringIO()
        pstats.Stats(str(path), stream=buffer).sort_stats("tottime").print_stats(top)
        lines = buffer.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
        print(f"\n== {path.stem}: top {top} by own time ==")
        print("\n".join(lines[start : start + top + 1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="(a), (b) bulk and (d)")
    parser.add_argument("--send-messages", type=int, default=200_000, help="per-record paths")
    parser.add_argument("--arrow-chunk", type=int, default=65_536)
    parser.add_argument("--rate", type=int, default=5_000, help="(c) msgs/s")
    parser.add_argument("--latency-s", type=float, default=5.0, help="(c) seconds per run")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--profile", help="profile broker and client per phase into this dir")
    parser.add_argument("--top", type=int, default=20, help="hotspots shown per phase")
    parser.add_argument("--broker-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.broker_child:
        broker_child(Path(args.broker_child))
        return
    profile_dir = Path(args.profile).resolve() if args.profile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        os.environ["_BENCH_PROFILE_DIR"] = str(profile_dir)
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        broker = Broker(Path(tmp), profile_dir)
        try:
            out = run(args, broker)
        finally:
            broker.stop()
    out.update(messages=args.messages, send_messages=args.send_messages, rate=args.rate)
    out.update(value_bytes=VALUE_BYTES, compression="lz4", acks=1, cpus=os.cpu_count())
    out.update(profiled=profile_dir is not None, load_average=os.getloadavg()[0])
    summarize(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    if profile_dir is not None:
        print_hotspots(profile_dir, args.top)


if __name__ == "__main__":
    main()
