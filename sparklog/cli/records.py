"""`produce` (kafka-console-producer, lines from stdin) and `consume`
(kafka-console-consumer)."""

from __future__ import annotations

import argparse
import time
from typing import Any, BinaryIO

from sparklog.cli.common import (
    POLL_MS,
    PRINT_FLAGS,
    CliError,
    check_bootstrap,
    client_settings,
    parse_pairs,
    progress,
)
from sparklog.cli.topics import describe_topics

#: The client settings every connection of a tool needs (Kafka's security settings).
SECURITY_PREFIXES = ("security.protocol", "sasl.", "ssl.")


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
    progress(f"produced {sent} record(s) to {args.topic}")
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
    if args.group is not None:
        if args.partition is not None:
            # kafka-console-consumer.sh: a group's members get partitions from the group
            raise CliError("--group and --partition cannot be used together: drop --partition "
                           "to consume as the group, or --group to read one partition")  # fmt: skip
        if settings.get("group.id", args.group) != args.group:
            raise CliError(f"--group {args.group!r} and --property group.id="
                           f"{settings['group.id']!r} disagree: give one")  # fmt: skip
        settings["group.id"] = args.group
        # the offsets committed are those of the records printed (see _consume_as_group)
        settings["enable.auto.commit"] = "false"
    settings["allow.auto.create.topics"] = "false"
    console = ("print.", "key.separator", "line.separator")
    options = {k: settings.pop(k) for k in list(settings) if k.startswith(console)}
    options.update({f"print.{f}": "true" for f in PRINT_FLAGS if getattr(args, f"print_{f}")})
    if args.key_separator is not None:
        options["key.separator"] = args.key_separator
    check_bootstrap(args.bootstrap_server)
    # the partitions are looked up over the same security as the records are read
    security = {k: v for k, v in settings.items() if k.startswith(SECURITY_PREFIXES)}
    with AdminClient({**security, "bootstrap.servers": args.bootstrap_server}) as admin:
        partitions = [
            p.partition for p in describe_topics(admin, [args.topic])[args.topic].partitions
        ]
    if args.group is not None:
        count = _consume_as_group(settings, args, options, out)
        progress(f"Processed a total of {count} messages")
        return 0
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
    progress(f"Processed a total of {count} messages")
    return 0


def _consume_as_group(
    settings: dict, args: argparse.Namespace, options: dict, out: BinaryIO
) -> int:
    """kafka-console-consumer.sh --group: subscribe as a member of the group (its committed
    offsets win over --from-beginning, which only sets auto.offset.reset), print, and at the
    end commit the offset after the last record printed of each partition, so that the group
    resumes at the first record not shown (Kafka's auto-commit of positions could skip records
    fetched but cut by --max-messages)."""
    from sparklog.client import KafkaConsumer

    printed: dict[tuple[str, int], int] = {}
    with KafkaConsumer(settings) as consumer:
        consumer.subscribe([args.topic])
        try:
            count = _print_records(consumer, args, options, out, printed)
        finally:
            if printed:
                consumer.commit({tp: offset + 1 for tp, offset in printed.items()})
    return count


def _print_records(
    consumer: Any,
    args: argparse.Namespace,
    options: dict,
    out: BinaryIO,
    printed: dict[tuple[str, int], int] | None = None,
) -> int:
    """Poll and print until --max-messages, --timeout-ms without a record, or Ctrl-C;
    `printed` gets each partition's last printed offset."""
    count, limit = 0, args.max_messages
    idle_since = time.monotonic()
    try:
        while limit is None or count < limit:
            records = consumer.poll(POLL_MS)
            if records:
                idle_since = time.monotonic()
            for record in records[: None if limit is None else limit - count]:
                out.write(format_record(record, options))
                count += 1
                if printed is not None:
                    printed[(record.topic, record.partition)] = record.offset
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
