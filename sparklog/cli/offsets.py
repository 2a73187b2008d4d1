"""`get-offsets` (kafka-get-offsets.sh) and `delete-records` (kafka-delete-records.sh).

`get-offsets [--topic T] [--partitions 0,2-4] [--topic-partitions T:0-2,U] [--time
latest|earliest|max-timestamp|-1|-2|-3|MS]` prints `topic:partition:offset` per partition,
sorted, as GetOffsetShell does (an empty offset where no record is at or after the time).
`delete-records --offset-json-file FILE` reads kafka-delete-records.sh's JSON
(`{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}`, offset -1 =
the high watermark) and prints each partition's new low watermark.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client
from sparklog.cli.topics import describe_topics
from sparklog.client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

#: --time's names (kafka-get-offsets.sh); MAX_TIMESTAMP is ListOffsets' -3 (KIP-734)
_TIMES = {"latest": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP, "max-timestamp": -3}


def add_offsets_parsers(client_command: Any) -> None:
    offsets = client_command("get-offsets", "print partitions' offsets (kafka-get-offsets.sh)")
    offsets.add_argument("--topic", help="a topic name or regular expression (default: all)")
    offsets.add_argument("--partitions", metavar="P[,P-Q...]",
                         help="comma-separated partitions or ranges (default: all)")  # fmt: skip
    offsets.add_argument("--topic-partitions", metavar="T[:P[-Q]][,...]",
                         help="topic:partitions pairs, instead of --topic/--partitions")  # fmt: skip
    offsets.add_argument("--time", default="latest",
                         help="latest (-1, default), earliest (-2), max-timestamp (-3), "
                         "or a timestamp in ms")  # fmt: skip
    offsets.add_argument("--exclude-internal-topics", action="store_true")

    delete = client_command("delete-records", "delete records below offsets "
                            "(kafka-delete-records.sh)")  # fmt: skip
    delete.add_argument("--offset-json-file", required=True, metavar="FILE")


def parse_time(text: str) -> int:
    if text.lower() in _TIMES:
        return _TIMES[text.lower()]
    try:
        value = int(text)
    except ValueError:
        value = -100
    if value < -3:
        raise CliError(f"--time {text!r}: use latest, earliest, max-timestamp, -1, -2, -3 "
                       "or a timestamp in milliseconds")  # fmt: skip
    return value


def parse_partitions(text: str, option: str) -> set[int] | None:
    """`0,2-4` as {0, 2, 3, 4}; empty text is every partition (None)."""
    if not text:
        return None
    out: set[int] = set()
    for part in text.split(","):
        low, _sep, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise CliError(f"{option} {text!r}: use partitions and ranges like 0,2-4")
        out.update(range(int(low), int(high or low) + 1))
    return out


def _selection(args: argparse.Namespace) -> list[tuple[str, set[int] | None]]:
    """(topic pattern, partitions or None) pairs from --topic-partitions or --topic/--partitions."""
    if args.topic_partitions:
        if args.topic or args.partitions:
            raise CliError("--topic-partitions cannot be combined with --topic or --partitions")
        pairs = []
        for spec in args.topic_partitions.split(","):
            # a range's comma is inside one entry's partitions: "t:0-2" only, as Kafka's syntax
            topic, _sep, parts = spec.partition(":")
            pairs.append((topic.strip(), parse_partitions(parts, "--topic-partitions")))
        return pairs
    return [(args.topic or ".*", parse_partitions(args.partitions or "", "--partitions"))]


def cmd_get_offsets(args: argparse.Namespace, out: TextIO) -> int:
    spec = parse_time(args.time)
    selection = _selection(args)
    with admin_client(args) as admin:
        names = admin.list_topics()
        chosen: set[tuple[str, int]] = set()
        for pattern, partitions in selection:
            try:
                regex = re.compile(pattern)
            except re.error as e:
                raise CliError(f"topic pattern {pattern!r}: {e}") from None
            matched = [n for n in names if regex.fullmatch(n)]
            if args.exclude_internal_topics:
                matched = [n for n in matched if not n.startswith("__")]
            for topic, description in describe_topics(admin, matched).items():
                chosen.update(
                    (topic, p.partition)
                    for p in description.partitions
                    if partitions is None or p.partition in partitions
                )
        if not chosen:
            raise CliError("no topic partition matches (see `python -m sparklog topics list`)")
        found = admin.list_offsets(dict.fromkeys(chosen, spec))
    for topic, partition in sorted(chosen):
        offset = found[(topic, partition)].offset
        out.write(f"{topic}:{partition}:{offset if offset >= 0 else ''}\n")
    return 0


def read_offset_json(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path} is not JSON: {e}") from None
    example = '{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}'
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError(f"{path}: expected a JSON like {example}")
    out: dict[tuple[str, int], int] = {}
    for entry in entries:
        try:
            tp = (str(entry["topic"]), int(entry["partition"]))
            offset = int(entry["offset"])
        except (KeyError, TypeError, ValueError):
            raise CliError(f"{path}: bad entry {entry!r}; expected like {example}") from None
        if tp in out:
            raise CliError(f"{path}: offset json file contains duplicate topic partitions: "
                           f"{tp[0]}-{tp[1]}")  # fmt: skip
        out[tp] = offset
    return out


def cmd_delete_records(args: argparse.Namespace, out: TextIO) -> int:
    before = read_offset_json(args.offset_json_file)
    with admin_client(args) as admin:
        describe_topics(admin, sorted({t for t, _ in before}))
        out.write("Executing records delete operation\n")
        low_watermarks = admin.delete_records(before)
    out.write("Records delete operation completed:\n")
    for (topic, partition), low in sorted(low_watermarks.items()):
        out.write(f"partition: {topic}-{partition}\tlow_watermark: {low}\n")
    return 0
