"""Benchmark: DataFrames through `format("sparklog")` against Parquet and the framework's ceiling.

One Spark application (`--master`, default local[4]), one sparklog broker, acks=1, lz4, and a
cached DataFrame of `--rows` rows (10-byte key, 100-byte hex-text value) in `--partitions`
partitions (default 4, also the topic's partition count):

- write: `df.write.format("sparklog")` vs `df.write.parquet` (Spark's default codec, snappy)
  vs a do-nothing sink: a Python data source whose `DataSourceArrowWriter` consumes the Arrow
  batches and drops them, i.e. what Spark's Python data source API itself costs: the ceiling
  of any Python sink.
- read: `count` and `sum(length(value))` over `spark.read.format("sparklog")` of what was
  written vs the same over the Parquet copy vs a Python data source yielding the same rows
  (Spark's Kafka source schema, 10,000-row Arrow batches memory-mapped from Arrow IPC files
  written once): the ceiling of any Python source. Parquet prunes columns; Python sources
  hand all seven columns to Spark.

The broker is a Spark task by default (`sparklog.start(spark, brokers=1)`); it then holds one
task slot through every measurement, Parquet's and the ceilings' too. `--external-broker`
runs it in a subprocess instead (`python -m sparklog serve --master none`), so every slot is
Spark's and the broker's CPU time shows apart from Spark's. Every action runs once on a small
DataFrame first (Python worker start-up, imports, pooled clients, JVM code generation), then
`--repeat` rounds (default 2; the first full-size Parquet write is still much slower than the
next) of each step's three actions, interleaved, best kept. Rates are rows over wall-clock seconds; each
measurement also reports the CPU seconds of the driver, the JVM, the Python workers, the
broker and every other process on the machine (from /proc), and rows per CPU second of this
application, a figure other load on a shared machine disturbs less than wall-clock rates.

`--profile DIR` runs the sparklog writer's and reader's task bodies under cProfile (CPU time
of the task's thread; the producer's sender and the consumer's network threads are not in
it) inside the Python workers: a subclass of the data source defined here, switched on by
the environment variable SPARKLOG_BENCH_PROFILE, which the workers inherit. One .prof file
per task; the top functions are printed. Profiling slows the tasks: its rates are not the
benchmark's.

Usage: .venv/bin/python jobs/bench_dataframe.py [--rows N] [--master URL] [--external-broker]
                                                [--repeat N] [--profile DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql.datasource import (  # noqa: E402 - after the environment Spark reads
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from sparklog.spark.batch_reader import SparkLogBatchReader  # noqa: E402
from sparklog.spark.partition_reader import SPARK_ARROW_SCHEMA  # noqa: E402
from sparklog.spark.source import SparkLogDataSource  # noqa: E402
from sparklog.spark.writer import SparkLogBatchWriter  # noqa: E402

KEY_BYTES = 10
VALUE_BYTES = 100
ARROW_BATCH_ROWS = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default
WARMUP_ROWS_PER_PARTITION = 20_000
NOW_MS = 1_700_000_000_000
PROFILE_ENV = "SPARKLOG_BENCH_PROFILE"
TARGETS = {"write_vs_parquet": 1.0, "write_vs_ceiling": 0.6, "read_vs_ceiling": 0.8}
SOURCE_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)


# ------------------------------------------------------------------------------ the data


def make_partition(index: int, rows: int) -> pa.Table:
    """`rows` records of partition `index` in Spark's Kafka source schema: keys `k%09d`,
    100-byte values of random hex digits (seeded by the index), 1,000 records per ms."""
    first = index * rows
    numbers = np.arange(first, first + rows, dtype=np.int64)
    digits = numbers[:, None] // 10 ** np.arange(KEY_BYTES - 2, -1, -1) % 10 + ord("0")
    keys = np.hstack([np.full((rows, 1), ord("k")), digits]).astype(np.uint8)
    rng = np.random.default_rng(index)
    hex_digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    values = hex_digits[rng.integers(0, 16, rows * VALUE_BYTES, dtype=np.uint8)]
    offsets = np.arange(rows, dtype=np.int64)
    micros = (NOW_MS + offsets // 1000) * 1000
    arrays = [
        _fixed_binary(keys.reshape(-1), KEY_BYTES, rows),
        _fixed_binary(values, VALUE_BYTES, rows),
        pa.repeat(pa.scalar("bench", pa.string()), rows),
        pa.repeat(pa.scalar(index, pa.int32()), rows),
        pa.array(offsets),
        pa.array(micros).cast(pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar(0, pa.int32()), rows),
    ]
    return pa.Table.from_arrays(arrays, schema=SPARK_ARROW_SCHEMA)


def _fixed_binary(data: np.ndarray, width: int, rows: int) -> pa.Array:
    offsets = np.arange(rows + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    )


def write_ipc_files(directory: Path, rows: int, partitions: int) -> list[str]:
    """One Arrow IPC file per partition, in 10,000-row batches; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(partitions):
        count = rows // partitions + (1 if index < rows % partitions else 0)
        table = make_partition(index, count)
        path = directory / f"part-{index}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
            for batch in table.to_batches(max_chunksize=ARROW_BATCH_ROWS):
                out.write_batch(batch)
        paths.append(str(path))
    return paths


# ------------------------------------------------------------------ the ceiling sources


class IpcPartition(InputPartition):
    def __init__(self, index: int, path: str) -> None:
        super().__init__(index)
        self.path = path


class MemoryReader(DataSourceReader):
    """Yields the batches of the IPC files, memory-mapped: no work but Spark's own."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def partitions(self) -> list[InputPartition]:
        return [IpcPartition(i, p) for i, p in enumerate(self.paths)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(partition.path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


class MemorySource(DataSource):
    """`spark.read.format("bench_memory").option("paths", "a,b,...")`: the read ceiling."""

    @classmethod
    def name(cls) -> str:
        return "bench_memory"

    def schema(self) -> str:
        return SOURCE_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return MemoryReader(self.options["paths"].split(","))


@dataclass(frozen=True)
class Dropped(WriterCommitMessage):
    rows: int


class NullWriter(DataSourceArrowWriter):
    """Consumes every Arrow batch and keeps nothing: the write ceiling."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Dropped:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return Dropped(rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class NullSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_null"

    def schema(self) -> str:
        return "key binary, value binary"

    def writer(self, schema: Any, overwrite: bool) -> NullWriter:
        return NullWriter()


# ------------------------------------------------------ sparklog, profiled in the workers


def _new_profile() -> Any:
    import cProfile

    return cProfile.Profile(time.thread_time)  # CPU of the task's thread, not its waits


def _dump(profile: Any, label: str) -> None:
    directory = os.environ[PROFILE_ENV]
    profile.dump_stats(os.path.join(directory, f"{label}-{os.getpid()}-{time.time_ns()}.prof"))


class ProfiledWriter(SparkLogBatchWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        if not os.environ.get(PROFILE_ENV):
            return super().write(iterator)
        profile = _new_profile()
        try:
            return profile.runcall(super().write, iterator)
        finally:
            _dump(profile, "write")


class ProfiledReader(SparkLogBatchReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = super().read(partition)
        if not os.environ.get(PROFILE_ENV):
            yield from batches
            return
        profile = _new_profile()  # on only while sparklog makes a batch, not while Spark eats it
        try:
            while True:
                profile.enable()
                try:
                    batch = next(batches, None)
                finally:
                    profile.disable()
                if batch is None:
                    return
                yield batch
        finally:
            _dump(profile, "read")


class ProfiledSparkLog(SparkLogDataSource):
    """`format("sparklog_profiled")`: sparklog's source and sink with profiled task bodies."""

    @classmethod
    def name(cls) -> str:
        return "sparklog_profiled"

    def reader(self, schema: Any) -> DataSourceReader:
        return ProfiledReader(super().reader(schema).options)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        plain = super().writer(schema, overwrite)
        return ProfiledWriter(plain.options, plain.columns)


# ------------------------------------------------------------------ CPU time per process


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _opens_under(pid: int, directory: str) -> bool:
    """Whether process `pid` has a file under `directory` open (the broker: its log files)."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(directory):
                    return True
    return False


class CpuMeter:
    """CPU seconds per role: driver (this process), jvm, python workers, broker."""

    def __init__(self, jvm_pid: int, broker_pid: int | None, broker_dir: str) -> None:
        self.jvm_pid = jvm_pid
        self.broker_pid = broker_pid  # an external broker; else found by its open files
        self.broker_dir = broker_dir

    def roles(self) -> dict[int, str]:
        tree = _children()
        roles = {os.getpid(): "driver", self.jvm_pid: "jvm"}
        frontier = list(tree.get(self.jvm_pid, []))
        while frontier:
            pid = frontier.pop()
            roles[pid] = "python_workers"
            frontier.extend(tree.get(pid, []))
        if self.broker_pid is not None:
            roles[self.broker_pid] = "broker"
        else:
            for pid, role in roles.items():
                if role == "python_workers" and _opens_under(pid, self.broker_dir):
                    roles[pid] = "broker"
        return roles

    def snapshot(self) -> dict[int, tuple[str, float]]:
        shot = {pid: (role, _cpu_s(pid)) for pid, role in self.roles().items()}
        shot[-1] = ("machine", _machine_busy_s())
        return shot

    def since(self, before: dict[int, tuple[str, float]]) -> dict[str, float]:
        """CPU seconds per role since `before`; `others`: every other process's."""
        out = {"driver": 0.0, "jvm": 0.0, "python_workers": 0.0, "broker": 0.0}
        machine = 0.0
        for pid, (role, now) in self.snapshot().items():
            then = before.get(pid, (role, 0.0))[1]
            if role == "machine":
                machine = now - then
            else:
                out[role] += max(0.0, now - then)
        out["others"] = max(0.0, machine - sum(out.values()))
        return {k: round(v, 2) for k, v in out.items()}


def _machine_busy_s() -> float:
    """CPU seconds every process on the machine spent (not idle, not waiting for I/O)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------- the brokers


class ExternalBroker:
    """`python -m sparklog serve --master none --brokers 1` in a subprocess."""

    def __init__(self, data_dir: Path, partitions: int) -> None:
        self.log_path = data_dir / "serve.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        command = ["-m", "sparklog", "serve", "--master", "none", "--brokers", "1", "--data-dir"]
        self.proc = subprocess.Popen(
            [sys.executable, *command, str(data_dir), "--config", f"num.partitions={partitions}"],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.bootstrap_servers = self._wait_for_bootstrap()

    def _wait_for_bootstrap(self) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("bootstrap.servers="):
                return line.strip().split("=", 1)[1]
        self.stop()
        sys.exit(f"`python -m sparklog serve` exited early; see {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# ---------------------------------------------------------------------------- measuring


def build_session(master: str, driver_memory: str) -> Any:
    from pyspark.sql import SparkSession

    from sparklog.spark.session import with_reference_jars

    spark = (
        with_reference_jars(SparkSession.builder.master(master))
        .appName("bench_dataframe")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.speculation", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


@dataclass
class Bench:
    """What every measurement needs."""

    spark: Any
    args: argparse.Namespace
    bootstrap: str
    admin: Any
    meter: CpuMeter
    work: Path
    sparklog_format: str
    topics: int = 0

    def new_topic(self) -> str:
        from sparklog.client import NewTopic

        self.topics += 1
        name = f"bench-{self.topics}"
        self.admin.create_topics([NewTopic(name, self.args.partitions, 1)])
        return name

    def measure(self, rows: int, actions: dict[str, tuple[str, Callable[[], Any]]]) -> dict:
        """Run each action once per round, --repeat rounds (interleaved, so a change in the
        machine's load hits all alike); per action the figures of its fastest run."""
        best: dict[str, dict] = {}
        for _ in range(self.args.repeat):
            for name, (_, action) in actions.items():
                before = self.meter.snapshot()
                started = time.perf_counter()
                result = action()
                wall = time.perf_counter() - started
                cpu = self.meter.since(before)
                if name not in best or wall < best[name]["wall_s"]:
                    ours = sum(v for k, v in cpu.items() if k != "others")
                    best[name] = {
                        "wall_s": round(wall, 3),
                        "rows_per_s": round(rows / wall),
                        "mb_per_s": round(rows * (KEY_BYTES + VALUE_BYTES) / wall / 1e6, 1),
                        "rows_per_cpu_s": round(rows / max(ours, 0.01)),
                        "cpu_s": cpu,
                        "result": result,
                    }
        for name, (label, _) in actions.items():
            f = best[name]
            print(
                f"  {label:<26} {f['rows_per_s'] / 1e6:6.3f} M rows/s {f['mb_per_s']:7.1f} MB/s "
                f"{f['wall_s']:7.2f} s | cpu s: "
                + " ".join(f"{k} {v:.1f}" for k, v in f["cpu_s"].items())
                + f" | {f['rows_per_cpu_s'] / 1e6:.2f} M rows/cpu-s",
                flush=True,
            )
        return best

    # -- the actions -------------------------------------------------------------------

    def write_sparklog(self, df: Any, topic: str) -> None:
        (
            df.write.format(self.sparklog_format)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", topic)
            .option("kafka.acks", "1")
            .option("kafka.compression.type", "lz4")
            .mode("append")
            .save()
        )

    def read_sparklog(self, topic: str) -> Any:
        return (
            self.spark.read.format(self.sparklog_format)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )

    def read_memory(self, paths: list[str]) -> Any:
        return self.spark.read.format("bench_memory").option("paths", ",".join(paths)).load()


def count_and_sum(df: Any) -> tuple[int, int]:
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)), F.sum(F.length("value"))).first()
    return int(row[0]), int(row[1] or 0)


def run_writes(bench: Bench, df: Any, rows: int, tag: str) -> tuple[dict, str, str]:
    """The three writes of `df`; returns the figures, a topic and a Parquet path holding it."""
    topics: list[str] = []
    parquet = bench.work / f"parquet-{tag}"

    def to_sparklog() -> None:
        topics.append(bench.new_topic())
        bench.write_sparklog(df, topics[-1])

    figures = bench.measure(
        rows,
        {
            "sparklog": ("write sparklog", to_sparklog),
            "parquet": ("write parquet", lambda: df.write.mode("overwrite").parquet(str(parquet))),
            "ceiling": (
                "write ceiling (null sink)",
                lambda: df.write.format("bench_null").mode("append").save(),
            ),
        },
    )
    return figures, topics[0], str(parquet)


def run_reads(bench: Bench, topic: str, parquet: str, paths: list[str], rows: int) -> dict:
    """The three reads, each checked: `rows` rows of VALUE_BYTES-byte values."""
    figures = bench.measure(
        rows,
        {
            "sparklog": ("read sparklog", lambda: count_and_sum(bench.read_sparklog(topic))),
            "parquet": ("read parquet", lambda: count_and_sum(bench.spark.read.parquet(parquet))),
            "ceiling": ("read ceiling (memory)", lambda: count_and_sum(bench.read_memory(paths))),
        },
    )
    expected = (rows, rows * VALUE_BYTES)
    for name, figure in figures.items():
        if figure["result"] != expected:
            sys.exit(f"read {name}: count and sum(length(value)) {figure['result']} != {expected}")
    return figures


def cached_frame(bench: Bench, paths: list[str]) -> Any:
    df = bench.read_memory(paths).select("key", "value").cache()
    df.count()
    return df


# ------------------------------------------------------------------------------ profiles


def print_profiles(directory: Path, top: int = 25) -> dict[str, list[str]]:
    """The top functions by own time over all workers' profiles, for writes and reads."""
    import pstats

    out: dict[str, list[str]] = {}
    for label in ("write", "read"):
        files = sorted(str(p) for p in directory.glob(f"{label}-*.prof"))
        if not files:
            continue
        stats = pstats.Stats(files[0])
        for f in files[1:]:
            stats.add(f)
        rows = []
        entries = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # tottime
        total = sum(v[2] for _, v in entries) or 1.0
        for (file, line, func), (_, calls, tottime, cumtime, _) in entries[:top]:
            where = f"{Path(file).name}:{line}({func})"
            rows.append(
                f"{tottime:8.2f}s {100 * tottime / total:5.1f}% cum {cumtime:8.2f}s "
                f"calls {calls:>8} {where}"
            )
        print(f"\nprofile of the sparklog {label} tasks ({len(files)} tasks, own time):")
        print("\n".join(f"  {r}" for r in rows))
        out[label] = rows
    return out


# ----------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--master", default="local[4]")
    parser.add_argument("--partitions", type=int, default=4, help="of the DataFrame and topic")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of runs (best kept)")
    parser.add_argument(
        "--external-broker",
        action="store_true",
        help="run the broker in a subprocess (python -m sparklog serve --master none)",
    )
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--profile", metavar="DIR", help="cProfile the sparklog tasks into DIR")
    parser.add_argument("--json", metavar="FILE", help="write the figures as one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-dataframe-"))
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_ENV] = str(Path(args.profile).resolve())  # before the JVM starts
    started = time.perf_counter()
    paths = write_ipc_files(work / "ipc", args.rows, args.partitions)
    warm_paths = write_ipc_files(
        work / "ipc-warmup", WARMUP_ROWS_PER_PARTITION * args.partitions, args.partitions
    )
    print(
        f"{args.rows:,} rows ({KEY_BYTES} B keys, {VALUE_BYTES} B values) in {args.partitions} "
        f"partitions, {args.master}, {os.cpu_count()} CPUs, broker "
        f"{'in a subprocess' if args.external_broker else 'as a Spark task'}, acks=1, lz4; "
        f"data generated in {time.perf_counter() - started:.1f} s; load average "
        + " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        flush=True,
    )
    import sparklog
    from sparklog.client import AdminClient

    spark = build_session(args.master, args.driver_memory)
    external = cluster = None
    try:
        if args.external_broker:
            external = ExternalBroker(work / "broker", args.partitions)
            bootstrap, broker_pid, broker_dir = external.bootstrap_servers, external.proc.pid, ""
            sparklog.register(spark, bootstrap_servers=bootstrap)
        else:
            broker_dir = str(work / "cluster" / "brokers")
            cluster = sparklog.start(
                spark,
                brokers=1,
                data_dir=work / "cluster",
                config={"num.partitions": str(args.partitions), "log.dirs": broker_dir},
            )
            bootstrap, broker_pid = cluster.bootstrap_servers, None
        for source in (MemorySource, NullSink, ProfiledSparkLog):
            spark.dataSource.register(source)
        jvm_pid = spark.sparkContext._gateway.proc.pid
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            bench = Bench(
                spark,
                args,
                bootstrap,
                admin,
                CpuMeter(jvm_pid, broker_pid, broker_dir),
                work,
                "sparklog_profiled" if args.profile else "sparklog",
            )
            result = run_all(bench, paths, warm_paths)
    finally:
        if cluster is not None:
            cluster.stop()
        if external is not None:
            external.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.profile:
        result["profile"] = print_profiles(Path(args.profile))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


def run_all(bench: Bench, paths: list[str], warm_paths: list[str]) -> dict:
    args = bench.args
    warm_rows = WARMUP_ROWS_PER_PARTITION * args.partitions
    print("warm-up (small DataFrame, every action once):", flush=True)
    repeat, bench.args.repeat = args.repeat, 1
    warm = cached_frame(bench, warm_paths)
    _, topic, parquet = run_writes(bench, warm, warm_rows, "warmup")
    run_reads(bench, topic, parquet, warm_paths, warm_rows)
    warm.unpersist()
    bench.args.repeat = repeat
    if args.profile:  # the warm-up's profiles are mostly start-up and imports
        for stale in Path(args.profile).glob("*.prof"):
            stale.unlink()
    started = time.perf_counter()
    df = cached_frame(bench, paths)
    print(f"cached the DataFrame in {time.perf_counter() - started:.1f} s; measuring:", flush=True)
    writes, topic, parquet = run_writes(bench, df, args.rows, "bench")
    reads = run_reads(bench, topic, parquet, paths, args.rows)
    df.unpersist()
    result: dict[str, Any] = {
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "rows": args.rows,
        "record_bytes": KEY_BYTES + VALUE_BYTES,
        "partitions": args.partitions,
        "master": args.master,
        "cpus": os.cpu_count(),
        "broker": "external" if args.external_broker else "spark_task",
        "repeat": args.repeat,
        "profiled": bool(args.profile),
    }
    for step, figures in (("write", writes), ("read", reads)):
        for name, figure in figures.items():
            for key in ("rows_per_s", "rows_per_cpu_s", "wall_s", "cpu_s"):
                result[f"{step}_{name}_{key}"] = figure[key]
    pairs = {
        "write_vs_parquet": (writes["sparklog"], writes["parquet"]),
        "write_vs_ceiling": (writes["sparklog"], writes["ceiling"]),
        "read_vs_ceiling": (reads["sparklog"], reads["ceiling"]),
        "read_vs_parquet": (reads["sparklog"], reads["parquet"]),
    }
    print("ratios: sparklog's rows/s over the other's (target), and the same per CPU second of")
    print("this application's processes (less disturbed by other load on the machine):")
    for name, (ours, theirs) in pairs.items():
        result[name] = round(ours["rows_per_s"] / theirs["rows_per_s"], 3)
        result[f"{name}_per_cpu_s"] = round(ours["rows_per_cpu_s"] / theirs["rows_per_cpu_s"], 3)
        target = TARGETS.get(name)
        verdict = "" if target is None else ("ok" if result[name] >= target else "SHORT")
        print(
            f"  {name:<18} {result[name]:6.3f}x  ({f'>= {target}' if target else '-':<7}) "
            f"{verdict:<5} per cpu-s {result[f'{name}_per_cpu_s']:6.3f}x"
        )
    return result


if __name__ == "__main__":
    main()
