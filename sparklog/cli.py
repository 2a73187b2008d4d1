"""`python -m sparklog ...`: run a cluster and take quick looks at it from a shell.

Subcommands, after Kafka's tools:

- `serve` (kafka-server-start): a controller and N brokers until SIGINT/SIGTERM, either in
  this process (`--master none`, an `EmbeddedCluster`) or as Spark tasks of a SparkSession
  with that master (`sparklog.start`); prints `bootstrap.servers=host:port,...` once ready.
- `topics create|list|describe|delete` (kafka-topics), `produce` (kafka-console-producer,
  lines from stdin), `consume` (kafka-console-consumer), all through `sparklog.client`.

Settings use Kafka's names: `--config k=v` (cluster/broker settings for `serve`, topic configs
for `topics create`), `--property k=v` (client settings and console options for `produce` and
`consume`), `--command-config FILE` (a client properties file). `serve` starts from
`conf/sparklog-defaults.conf` (or `--config-file`). A user error (unknown topic, unreachable
bootstrap server, bad setting) prints one `error: ...` line and exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from sparklog.client.config import ConfigError, parse_bootstrap_servers
from sparklog.errors import KafkaError, UnknownTopicOrPartitionError

DEFAULTS_FILE = "sparklog-defaults.conf"
_CONNECT_TIMEOUT_S = 5.0
_POLL_MS = 200
_PRINT_FLAGS = ("key", "offset", "partition", "timestamp", "headers")
_SPARK_STOP_TIMEOUT_S = 30.0


class CliError(Exception):
    """A user error: printed as `error: <message>`, exit code 1, no traceback."""


# -- settings ----------------------------------------------------------------------------------


def parse_pairs(pairs: Sequence[str] | None, option: str) -> dict[str, str]:
    """`["a=1", "b=x=y"]` as `{"a": "1", "b": "x=y"}`; a pair without `=` is a user error."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"{option} expects name=value, got {pair!r}")
        out[name.strip()] = value.strip()
    return out


def read_properties_file(path: str | Path) -> dict[str, str]:
    """A Java-style properties file as a dict (a missing or bad file is a user error)."""
    from sparklog.controller.configs import read_properties

    try:
        return read_properties(path)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise CliError(str(e)) from None


def default_config_file() -> Path | None:
    """`$SPARKLOG_CONF_DIR/sparklog-defaults.conf`, else the project's `conf/` copy, if any."""
    conf_dir = os.environ.get("SPARKLOG_CONF_DIR")
    candidates = [Path(conf_dir)] if conf_dir else []
    candidates.append(Path(__file__).resolve().parent.parent / "conf")
    for directory in candidates:
        if (directory / DEFAULTS_FILE).is_file():
            return directory / DEFAULTS_FILE
    return None


def server_settings(args: argparse.Namespace) -> dict[str, str]:
    """Cluster settings for `serve`: the defaults file, then each `--config k=v`."""
    path = args.config_file if args.config_file is not None else default_config_file()
    settings = read_properties_file(path) if path else {}
    settings.update(parse_pairs(args.config, "--config"))
    return settings


def client_settings(args: argparse.Namespace, **defaults: Any) -> dict[str, Any]:
    """Client settings: CLI defaults < `--command-config FILE` < `--property` < the bootstrap."""
    settings: dict[str, Any] = dict(defaults)
    if getattr(args, "command_config", None):
        settings.update(read_properties_file(args.command_config))
    settings.update(parse_pairs(getattr(args, "property", None), "--property"))
    settings["bootstrap.servers"] = args.bootstrap_server
    return settings


def check_bootstrap(bootstrap: str, timeout_s: float = _CONNECT_TIMEOUT_S) -> None:
    """Fail fast with a clear message when no bootstrap server accepts a connection."""
    try:
        addresses = parse_bootstrap_servers(tuple(s.strip() for s in bootstrap.split(",")))
    except ConfigError as e:
        raise CliError(f"--bootstrap-server: {e}") from None
    problems = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as e:
            problems.append(f"{host}:{port}: {e.strerror or e}")
    raise CliError(
        f"cannot connect to any bootstrap server ({'; '.join(problems)}); is a sparklog "
        "cluster running there? Start one with `python -m sparklog serve`"
    )


# -- serve -------------------------------------------------------------------------------------


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set `stop` on SIGINT/SIGTERM while inside (main thread only); restores the handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = lambda signum, frame: stop.set()  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def announce(bootstrap_servers: str, out: TextIO | None = None) -> None:
    """The one line scripts wait for (stdout, flushed)."""
    out = out or sys.stdout
    print(f"bootstrap.servers={bootstrap_servers}", file=out, flush=True)


def wait_until(stop: threading.Event, alive: Callable[[], bool] = lambda: True) -> None:
    """Block until `stop` is set (a signal) or `alive()` turns false."""
    while not stop.wait(0.2):
        if not alive():
            return


def serve_spark(
    spark: Any,
    brokers: int,
    data_dir: Path,
    settings: dict[str, str],
    stop: threading.Event,
    jvm_alive: Callable[[], bool] = lambda: True,
) -> bool:
    """Run a cluster as Spark tasks of `spark` until `stop` is set (also `jobs/serve.py`).

    Returns False when `jvm_alive()` turned false first: Spark's JVM is gone, and with it every
    broker task; only the controller (in this process) is left to stop.
    """
    import sparklog

    settings = dict(settings)
    settings.setdefault("log.dirs", str(data_dir / "brokers"))
    master = spark.sparkContext.master
    _progress(f"starting a controller and {brokers} broker(s) as Spark tasks on {master}")
    cluster = sparklog.start(spark, brokers=brokers, config=settings, data_dir=data_dir)
    try:
        announce(cluster.bootstrap_servers)
        _progress(f"serving (data in {data_dir}); Ctrl-C or SIGTERM stops it")
        wait_until(stop, jvm_alive)
    except BaseException:
        cluster.stop()
        raise
    if not jvm_alive():
        _progress("Spark's JVM is gone (and its broker tasks with it); stopping the controller")
        cluster.controller.stop()
        return False
    _progress("stopping the brokers and the controller")
    cluster.stop()
    return True


def _serve_embedded(
    brokers: int, data_dir: Path, settings: dict[str, str], stop: threading.Event
) -> None:
    from sparklog.broker.embedded import EmbeddedCluster

    _progress(f"starting a controller and {brokers} broker(s) in this process")
    cluster = EmbeddedCluster(brokers=brokers, data_dir=data_dir, config=settings)
    cluster.start()
    try:
        announce(cluster.bootstrap_servers)
        _progress(f"serving (data in {data_dir}); Ctrl-C or SIGTERM stops it")
        wait_until(stop)
        _progress("stopping the brokers and the controller")
    finally:
        cluster.stop()


def _new_spark_session(master: str, brokers: int) -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise CliError(f"--master {master} needs pyspark ({e}); or use --master none") from None
    _progress(f"starting Spark ({master})")
    # Spark's Python workers (the brokers) run this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sparklog.spark.session import with_reference_jars

    spark = (
        with_reference_jars(SparkSession.builder.master(master))
        .appName(f"sparklog serve ({brokers} brokers)")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.speculation", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _stop_spark(spark: Any) -> None:
    """Stop the session and wait for its JVM (it exits when its stdin pipe closes) and for the
    JVM's own children (Python workers), so nothing outlives `serve`."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    children = _descendants(proc.pid) if proc is not None else set()
    if proc is None or proc.poll() is None:  # a dead JVM cannot answer spark.stop()
        spark.stop()
    if gateway is not None:
        gateway.shutdown()
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(_SPARK_STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: do not leave it behind
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + _SPARK_STOP_TIMEOUT_S
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc; empty elsewhere)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int(
                (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            )
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise CliError(f"--brokers {args.brokers}: a cluster needs at least one broker")
    settings = server_settings(args)
    master = args.master or f"local[{args.brokers + 1}]"
    stop = threading.Event()
    with stop_on_signals(stop), _data_dir(args.data_dir) as data_dir:
        if master == "none":
            _serve_embedded(args.brokers, data_dir, settings, stop)
            return 0
        from sparklog.spark.cluster import ClusterStartError

        spark = _new_spark_session(master, args.brokers)
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        try:
            if not serve_spark(
                spark, args.brokers, data_dir, settings, stop, lambda: proc.poll() is None
            ):
                raise CliError(f"Spark's JVM exited (code {proc.returncode}); the brokers are gone")
        except ClusterStartError as e:
            raise CliError(str(e)) from None
        finally:
            _stop_spark(spark)
    return 0


@contextmanager
def _data_dir(path: str | None) -> Iterator[Path]:
    """`path` (kept), or a temp dir removed afterwards."""
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="sparklog-serve-") as tmp:
        _progress(f"no --data-dir: using {tmp} (removed on exit)")
        yield Path(tmp)


def _progress(message: str) -> None:
    print(f"sparklog: {message}", file=sys.stderr, flush=True)


# -- topics ------------------------------------------------------------------------------------


def _admin(args: argparse.Namespace) -> Any:
    from sparklog.client import AdminClient

    check_bootstrap(args.bootstrap_server)
    return AdminClient(client_settings(args))


def _topic_name(args: argparse.Namespace, required: bool = True) -> str | None:
    name = args.topic
    if required and not name:
        raise CliError(f"topics {args.action} needs a topic: --topic NAME")
    return name


def cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    from sparklog.client import NewTopic
    from sparklog.errors import TopicAlreadyExistsError

    with _admin(args) as admin:
        if args.action == "list":
            for name in admin.list_topics():
                print(name, file=out)
        elif args.action == "create":
            name = _topic_name(args)
            topic = NewTopic(
                name, args.partitions, args.replication_factor, parse_pairs(args.config, "--config")
            )
            try:
                admin.create_topics([topic])
            except TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise CliError(f"topic {name!r} already exists") from None
                return 0
            print(f"Created topic {name}.", file=out)
        elif args.action == "describe":
            name = _topic_name(args, required=False)
            names = [name] if name else admin.list_topics()
            for description in _describe(admin, names).values():
                _print_description(admin, description, out)
        elif args.action == "delete":
            name = _topic_name(args)
            _describe(admin, [name])
            admin.delete_topics([name])
            print(f"Deleted topic {name}.", file=out)
    return 0


def _describe(admin: Any, names: list[str]) -> dict[str, Any]:
    try:
        return admin.describe_topics(names) if names else {}
    except UnknownTopicOrPartitionError:
        missing = [n for n in names if n not in admin.list_topics()]
        raise CliError(
            f"topic {', '.join(map(repr, missing or names))} does not exist "
            "(see `python -m sparklog topics list`)"
        ) from None


def _print_description(admin: Any, d: Any, out: TextIO) -> None:
    """kafka-topics --describe's format: a topic line, then one line per partition."""
    entries = admin.describe_configs([("topic", d.name)]).get(("topic", d.name), {})
    configs = ",".join(
        f"{e.name}={e.value}"
        for e in sorted(entries.values(), key=lambda e: e.name)
        if e.source == "DYNAMIC_TOPIC_CONFIG"
    )
    replication = max((len(p.replicas) for p in d.partitions), default=0)
    print(
        f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
        f"ReplicationFactor: {replication}\tConfigs: {configs}",
        file=out,
    )
    for p in sorted(d.partitions, key=lambda p: p.partition):
        ids = lambda xs: ",".join(map(str, xs))  # noqa: E731
        print(
            f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: "
            f"{p.leader if p.leader >= 0 else 'none'}\tReplicas: {ids(p.replicas)}\tIsr: {ids(p.isr)}",
            file=out,
        )


# -- produce -----------------------------------------------------------------------------------


def parse_line(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line; with a separator the key is everything before it."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise CliError(f"line {number} has no key separator {separator.decode()!r}")
    return key, value


def cmd_produce(args: argparse.Namespace, stdin: BinaryIO) -> int:
    from sparklog.client import KafkaProducer

    settings = client_settings(args)
    console = {k: settings.pop(k) for k in ("parse.key", "key.separator") if k in settings}
    separator = args.key_separator or (
        console.get("key.separator", "\t") if console.get("parse.key") == "true" else None
    )
    headers = [(k, v.encode()) for k, v in parse_pairs(args.header, "--header").items()]
    check_bootstrap(args.bootstrap_server)
    errors: list[BaseException] = []
    sent = 0

    def on_delivery(_metadata: Any, error: BaseException | None) -> None:
        if error is not None:
            errors.append(error)

    with KafkaProducer(settings) as producer:
        producer.partitions_for(args.topic)  # fails fast on a topic that cannot be produced to
        for number, raw in enumerate(stdin, 1):
            line = raw.rstrip(b"\n").rstrip(b"\r")
            key, value = parse_line(line, separator.encode() if separator else None, number)
            producer.send(args.topic, value, key, headers, args.partition,
                          on_delivery=on_delivery)  # fmt: skip
            sent += 1
            if errors:
                break
        producer.flush()
    if errors:
        raise CliError(f"{len(errors)} record(s) failed; the first: {errors[0]}")
    _progress(f"produced {sent} record(s) to {args.topic}")
    return 0


# -- consume -----------------------------------------------------------------------------------


def format_record(record: Any, options: dict[str, str]) -> bytes:
    """Kafka's `DefaultMessageFormatter`: [timestamp] [partition] [offset] [headers] [key] value."""
    sep = options.get("key.separator", "\t").encode()
    on = lambda name: options.get(name, "false").lower() == "true"  # noqa: E731
    parts: list[bytes] = []
    if on("print.timestamp"):
        kind = {0: "CreateTime", 1: "LogAppendTime"}.get(record.timestamp_type, "NO_TIMESTAMP")
        parts.append(f"{kind}:{record.timestamp}".encode())
    if on("print.partition"):
        parts.append(f"Partition:{record.partition}".encode())
    if on("print.offset"):
        parts.append(f"Offset:{record.offset}".encode())
    if on("print.headers"):
        parts.append(
            b",".join(k.encode() + b":" + (b"null" if v is None else v) for k, v in record.headers)
            or b"NO_HEADERS"
        )
    if on("print.key"):
        parts.append(b"null" if record.key is None else record.key)
    parts.append(b"null" if record.value is None else record.value)
    return sep.join(parts) + options.get("line.separator", "\n").encode()


def cmd_consume(args: argparse.Namespace, out: BinaryIO) -> int:
    from sparklog.client import AdminClient, KafkaConsumer

    if args.offset is not None and args.partition is None:
        raise CliError("--offset needs --partition")
    reset = "earliest" if args.from_beginning else "latest"
    settings = client_settings(args, **{"auto.offset.reset": reset})
    settings["allow.auto.create.topics"] = "false"
    console = ("print.", "key.separator", "line.separator")
    options = {k: settings.pop(k) for k in list(settings) if k.startswith(console)}
    options.update({f"print.{f}": "true" for f in _PRINT_FLAGS if getattr(args, f"print_{f}")})
    if args.key_separator is not None:
        options["key.separator"] = args.key_separator
    check_bootstrap(args.bootstrap_server)
    with AdminClient({"bootstrap.servers": args.bootstrap_server}) as admin:
        partitions = [p.partition for p in _describe(admin, [args.topic])[args.topic].partitions]
    if args.partition is not None:
        if args.partition not in partitions:
            raise CliError(
                f"topic {args.topic!r} has no partition {args.partition} "
                f"({len(partitions)} partitions)"
            )
        partitions = [args.partition]
    with KafkaConsumer(settings) as consumer:
        consumer.assign([(args.topic, p) for p in sorted(partitions)])
        _position(consumer, args)
        count = _print_records(consumer, args, options, out)
    _progress(f"Processed a total of {count} messages")
    return 0


def _print_records(consumer: Any, args: argparse.Namespace, options: dict, out: BinaryIO) -> int:
    """Poll and print until --max-messages, --timeout-ms without a record, or Ctrl-C."""
    count, limit = 0, args.max_messages
    idle_since = time.monotonic()
    try:
        while limit is None or count < limit:
            records = consumer.poll(_POLL_MS)
            if records:
                idle_since = time.monotonic()
            for record in records[: None if limit is None else limit - count]:
                out.write(format_record(record, options))
                count += 1
            out.flush()
            idle_ms = (time.monotonic() - idle_since) * 1000
            if args.timeout_ms is not None and idle_ms >= args.timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    return count


def _position(consumer: Any, args: argparse.Namespace) -> None:
    """--offset (earliest/latest/N, with --partition), else --from-beginning, else the end."""
    if args.offset is None:
        consumer.seek_to_beginning() if args.from_beginning else consumer.seek_to_end()
        return
    if args.offset in ("earliest", "latest"):
        consumer.seek_to_beginning() if args.offset == "earliest" else consumer.seek_to_end()
        return
    if not args.offset.isdigit():
        raise CliError(
            f"--offset must be earliest, latest or a non-negative number; got {args.offset!r}"
        )
    consumer.seek((args.topic, args.partition), int(args.offset))


# -- parser and main ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparklog", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="WARNING", help="Python logging level (WARNING)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run a controller and brokers until stopped")
    serve.add_argument("--brokers", type=int, default=1, help="number of brokers (1)")
    serve.add_argument("--data-dir", help="controller and broker data (default: a temp dir)")
    serve.add_argument(
        "--master", help="Spark master (default local[brokers+1]); 'none' runs in this process"
    )
    serve.add_argument("--config", action="append", metavar="K=V", help="cluster/broker setting")
    serve.add_argument("--config-file", help=f"properties file (default conf/{DEFAULTS_FILE})")

    def client_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
        sub.add_argument("--command-config", metavar="FILE", help="client properties file")
        return sub

    topics = client_command("topics", "create, list, describe or delete topics")
    topics.add_argument("action", choices=("create", "list", "describe", "delete"))
    topics.add_argument("--topic")
    topics.add_argument("--partitions", type=int, default=-1, help="(the broker's num.partitions)")
    topics.add_argument("--replication-factor", type=int, default=-1)
    topics.add_argument("--config", action="append", metavar="K=V", help="topic config")
    topics.add_argument("--if-not-exists", action="store_true")

    produce = client_command("produce", "send stdin's lines as records")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key-separator", help="lines are KEY<sep>VALUE (parse.key=true)")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument("--header", action="append", metavar="K=V", help="header on every record")
    produce.add_argument("--property", "--producer-property", action="append", metavar="K=V",
                         help="producer setting (or parse.key, key.separator)")  # fmt: skip

    consume = client_command("consume", "print records of a topic")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", help="earliest, latest or an offset (with --partition)")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int, help="exit after this long without a record")
    for flag in _PRINT_FLAGS:
        consume.add_argument(f"--print-{flag}", action="store_true")
    consume.add_argument("--key-separator", help="between printed fields (a tab)")
    consume.add_argument("--property", "--consumer-property", action="append", metavar="K=V",
                         help="consumer setting (or print.key, key.separator, ...)")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        logging.basicConfig(
            level=args.log_level.upper(),
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "topics":
            return cmd_topics(args, sys.stdout)
        if args.command == "produce":
            return cmd_produce(args, sys.stdin.buffer)
        return cmd_consume(args, sys.stdout.buffer)
    except (CliError, KafkaError, ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... consume | head`: the reader went away
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
