"""`tables list|status`: the topics' remote tiers (Delta tables) and how far behind they are.

`tables list` prints one line per topic with a table: where it is, its Delta version, how
many partitions, files, rows and bytes it holds. `tables status` prints one line per
partition (DescribeConfigs-free for the tier itself: the table is read directly):

    TOPIC  PARTITION  TABLE-START  COPIED-END  LOG-END  PENDING  SECONDS-BEHIND  VERSION  FILES

`COPIED-END` is what the table holds up to (exclusive, the partition's app-transaction
version), `LOG-END` the partition's high watermark, `PENDING` the offsets not uploaded yet
(Kafka's RemoteCopyLagOffsets, counted against the high watermark: the leader also waits for
the LSO), `SECONDS-BEHIND` the age of the oldest record not in the table (0 when nothing is
pending; it reads that one record from the brokers). Every partition of a selected topic has
a line: one the table holds nothing of yet shows `-` for TABLE-START, COPIED-END and FILES and
counts PENDING from the log start (a topic without a table yet: `-` for VERSION too).

Which topics: `--topic` (a name or regex; one that names no topic is an error), else every
topic with `remote.storage.enable=true`.
Where their tables are: `--root` (the cluster's `remote.table.root`), else what a broker
describes; `--storage-option K=V` reaches an object store (delta-rs names, as the cluster's
`storage.options.*`).
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client, client_settings, parse_pairs


def add_tables_parser(client_command: Any) -> None:
    tables = client_command("tables", "the topics' remote tiers (Delta tables): list, status")
    tables.add_argument("action", choices=("list", "status"))
    tables.add_argument("--topic", help="a topic name or regular expression (default: every "
                        "topic with remote.storage.enable=true)")  # fmt: skip
    tables.add_argument("--root", help="the cluster's remote.table.root (default: a broker's)")
    tables.add_argument("--storage-option", action="append", metavar="K=V",
                        help="delta-rs storage option for an object store")  # fmt: skip


def cmd_tables(args: argparse.Namespace, out: TextIO) -> int:
    from sparklog.spark.table_listing import TierLocator

    storage = parse_pairs(args.storage_option, "--storage-option")
    with admin_client(args) as admin:
        locator = TierLocator(args.root, storage, admin)
        topics = _topics(admin, args.topic, explicit_root=bool(args.root))
        if args.topic and not topics:
            raise CliError(
                f"no topic named or matching {args.topic!r} (python -m sparklog topics list)"
            )
        snapshots = locator.snapshots(topics)
        if not snapshots and args.topic and not re.fullmatch(r"[\w.-]+", args.topic):
            raise CliError(f"no topic matching {args.topic!r} has a table")
        if args.action == "list":
            _print(out, _list_rows(snapshots))
            return 0
        shown = [t for t in topics if t in snapshots or not args.root]
        partitions = {t: len(d.partitions) for t, d in admin.describe_topics(shown).items()}
        tps = [(t, p) for t in shown for p in range(partitions.get(t, 0))]
        ends = _offsets(admin, tps, -1)
        starts = _offsets(admin, [tp for tp in tps if _tier(snapshots, tp) is None], -2)
    copied = {tp: tier.end_offset if (tier := _tier(snapshots, tp)) else starts.get(tp, 0)
              for tp in tps}  # fmt: skip
    behind = _seconds_behind(args, copied, ends, time.time())
    header = ("TOPIC", "PARTITION", "TABLE-START", "COPIED-END", "LOG-END", "PENDING",
              "SECONDS-BEHIND", "VERSION", "FILES")  # fmt: skip
    rows: list[tuple[str, ...]] = [header]
    for topic, p in tps:
        tier, snap, end = (
            _tier(snapshots, (topic, p)),
            snapshots.get(topic),
            ends.get((topic, p), -1),
        )
        rows.append((topic, str(p), str(tier.start_offset) if tier else "-",
                     str(tier.end_offset) if tier else "-", str(end),
                     str(max(0, end - copied[(topic, p)])), f"{behind.get((topic, p), 0.0):.1f}",
                     str(snap.version) if snap else "-", str(len(tier.files)) if tier else "-"))  # fmt: skip
    _print(out, rows)
    return 0


def _tier(snapshots: dict[str, Any], tp: tuple[str, int]) -> Any | None:
    """What the table holds of one partition, None when nothing (or no table)."""
    snap = snapshots.get(tp[0])
    return None if snap is None else snap.partitions.get(tp[1])


def _offsets(admin: Any, tps: list[tuple[str, int]], spec: int) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    found = admin.list_offsets(dict.fromkeys(tps, spec))
    return {(tp[0], int(tp[1])): r.offset for tp, r in found.items()}


def _topics(admin: Any, pattern: str | None, *, explicit_root: bool) -> list[str]:
    """Topics to look at: those matching `--topic`, else those whose config enables the
    remote tier (with `--root`, every topic: a table there may outlive the setting)."""
    names = sorted(t for t in admin.list_topics() if not t.startswith("__"))
    if pattern:
        exact = [t for t in names if t == pattern]
        return exact or [t for t in names if re.fullmatch(pattern, t)]
    if explicit_root:
        return names
    configs = admin.describe_configs([("topic", t) for t in names]) if names else {}
    return sorted(
        resource.name
        for resource, entries in configs.items()
        if str(getattr(entries.get("remote.storage.enable"), "value", "")).lower() == "true"
    )


def _list_rows(snapshots: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [
        ("TOPIC", "VERSION", "PARTITIONS", "FILES", "ROWS", "BYTES", "LOCATION")
    ]
    for topic, snap in snapshots.items():
        files = [f for tier in snap.partitions.values() for f in tier.files]
        rows.append((topic, str(snap.version), str(len(snap.partitions)), str(len(files)),
                     str(sum(f.num_records for f in files)), str(sum(f.size_bytes for f in files)),
                     snap.location))  # fmt: skip
    return rows


def _seconds_behind(
    args: argparse.Namespace,
    copied: dict[tuple[str, int], int],
    ends: dict[tuple[str, int], int],
    now_s: float,
) -> dict[tuple[str, int], float]:
    """Age of the first record past each lagging partition's copied end (or log start)."""
    lagging = {tp: end for tp, end in copied.items() if ends.get(tp, -1) > end}
    if not lagging:
        return {}
    from sparklog.client import KafkaConsumer

    config = client_settings(args, **{"enable.auto.commit": False, "auto.offset.reset": "latest"})
    out = {}
    with KafkaConsumer(config) as consumer:
        for tp, offset in sorted(lagging.items()):
            consumer.assign([tp])
            consumer.seek(tp, offset)
            batch = consumer.poll_arrow(2000)
            if batch.num_rows:
                first_ms = int(batch.column("timestamp").cast("int64")[0].as_py())
                out[tp] = max(0.0, now_s - first_ms / 1000)
    return out


def _print(out: TextIO, rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
