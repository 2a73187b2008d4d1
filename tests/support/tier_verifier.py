"""A topic against its Delta table, offset by offset (issue 32 §4; the idea of Redpanda's
`datalake_verifier`, which consumes a topic and queries its Iceberg table, rebuilt here for a
table that is also the topic's remote tier).

`verify_topic(bootstrap, topic, location)` consumes every partition from its beginning with
confluent-kafka twice, read_uncommitted and read_committed, each up to its end (the high
watermark, the last stable offset: librdkafka's partition EOF), reads the table with
`deltalake`, and checks per partition:

- the table: no offset twice (a duplicate, or worse one offset with two values), no gap between
  its first and last offset, whole batches only (first row = its batch's base offset, last row
  = its batch's last offset), every row inside its batch, the app transaction
  `<topic id>-<partition>` at the rows' end (what makes uploads exactly once);
- the table against the log, over the offsets both hold: every record consumed
  (read_uncommitted) is a data row of the table with the same key, value, headers, timestamp
  and timestamp type; every data row was consumed; every other row is a control record
  (a 4-byte key: version 0, type 0 = abort / 1 = commit, transactional), never consumed;
- transactions: each transactional record's outcome follows from its producer's next marker
  in the table; the `aborted` column must say the same (else the table is wrong), a
  read_committed consumer must not get aborted records (else the broker's fetch is wrong:
  its aborted-transactions list), and the rows `COMMITTED_RECORDS_FILTER` keeps (SQL over the
  table, as an analyst would run it) are exactly the committed records.

The checks are a pure function (`check_partition`) of what was consumed and what the table
holds, so tests can feed it a damaged table and see each kind of error reported.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparklog.storage.remote.schema import COMMITTED_RECORDS_FILTER, TOPIC_ID_KEY, app_id

#: librdkafka for the verifier's consumers: IPv4 loopback, no group, EOF events per partition.
_CONSUMER = {
    "broker.address.family": "v4",
    "group.id": "tier-verifier",
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
}

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """What a consumer sees of one record (timestamp type as Kafka's attribute bit: 0 create
    time, 1 log append time)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_type: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the topic table, the columns the verifier checks."""

    record: Record
    batch_base_offset: int
    batch_last_offset_delta: int
    is_transactional: bool
    is_control: bool
    aborted: bool
    producer_id: int = -1


@dataclass(slots=True)
class PartitionReport:
    partition: int
    consumed: int = 0  # records read_uncommitted
    committed: int = 0  # records read_committed
    first_consumed_offset: int | None = None
    table_start_offset: int | None = None
    table_end_offset: int | None = None  # exclusive
    txn_version: int | None = None
    rows: int = 0
    control_rows: int = 0
    aborted_rows: int = 0
    compared: int = 0  # offsets checked against a consumed record


@dataclass(slots=True)
class VerificationReport:
    topic: str
    partitions: dict[int, PartitionReport] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    #: what the read_uncommitted consumer got, per partition
    consumed: dict[int, list[Record]] = field(default_factory=dict)

    def assert_ok(self) -> VerificationReport:
        if self.errors:
            shown = "\n  ".join(self.errors[:30])
            more = f"\n  ... {len(self.errors) - 30} more" if len(self.errors) > 30 else ""
            raise AssertionError(f"topic {self.topic!r} vs its table:\n  {shown}{more}")
        return self

    def summary(self) -> str:
        """One line per partition: what was read and compared (printed by the chaos tests)."""
        return "\n".join(
            f"{self.topic}-{p}: consumed {r.consumed} (committed {r.committed}), table "
            f"[{r.table_start_offset}, {r.table_end_offset}) {r.rows} rows ({r.control_rows} "
            f"markers, {r.aborted_rows} aborted), {r.compared} compared"
            for p, r in sorted(self.partitions.items())
        )

    def tiered_end_offsets(self) -> dict[int, int | None]:
        return {p: r.table_end_offset for p, r in self.partitions.items()}


# ------------------------------------------------------------------------------- checks


def _control_type(key: bytes | None) -> int | None:
    """The control record type (0 abort, 1 commit) of a control record key, None if malformed."""
    if key is None or len(key) != 4:
        return None
    version, kind = struct.unpack(">hh", key)
    return kind if version == 0 and kind in (0, 1) else None


def _table_shape(partition: int, rows: Sequence[Row], errors: list[str]) -> dict[int, Row]:
    """Duplicates, gaps and batch boundaries of one partition's rows; returns offset -> row."""
    by_offset: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        by_offset[row.record.offset].append(row)
    for offset, same in sorted(by_offset.items()):
        if len(same) > 1:
            what = "two values" if len(set(same)) > 1 else f"{len(same)} identical rows"
            errors.append(f"p{partition}: offset {offset} has {what} in the table")
    offsets = sorted(by_offset)
    for before, after in zip(offsets, offsets[1:], strict=False):
        if after != before + 1:
            errors.append(f"p{partition}: gap in the table: offsets [{before + 1}, {after})")
    unique = {o: same[0] for o, same in by_offset.items()}
    for offset, row in unique.items():
        last = row.batch_base_offset + row.batch_last_offset_delta
        if not row.batch_base_offset <= offset <= last:
            errors.append(
                f"p{partition}: offset {offset} outside its batch [{row.batch_base_offset}, {last}]"
            )
    if offsets:
        first, last_row = unique[offsets[0]], unique[offsets[-1]]
        if first.batch_base_offset != offsets[0]:
            errors.append(
                f"p{partition}: the table starts at {offsets[0]}, inside the batch at "
                f"{first.batch_base_offset} (whole batches only)"
            )
        if last_row.batch_base_offset + last_row.batch_last_offset_delta != offsets[-1]:
            errors.append(f"p{partition}: the table ends at {offsets[-1]} inside a batch")
    return unique


def _against_log(
    partition: int,
    table: Mapping[int, Row],
    uncommitted: Mapping[int, Record],
    window: range,
    errors: list[str],
) -> int:
    """Rows vs read_uncommitted records over `window`; returns how many offsets compared."""
    compared = 0
    for offset in window:
        row, record = table.get(offset), uncommitted.get(offset)
        if row is None:
            if record is not None:
                errors.append(f"p{partition}: offset {offset} consumed but not in the table")
            continue
        if row.is_control:
            if record is not None:
                errors.append(f"p{partition}: offset {offset} is a control row but was consumed")
            elif _control_type(row.record.key) is None or not row.is_transactional:
                errors.append(
                    f"p{partition}: control row {offset} is not a transaction marker "
                    f"(key {row.record.key!r}, transactional {row.is_transactional})"
                )
            continue
        if row.aborted and not row.is_transactional:
            errors.append(f"p{partition}: offset {offset} aborted but not transactional")
        if record is None:
            errors.append(f"p{partition}: data row {offset} is in the table, not in the log")
            continue
        compared += 1
        if row.record != record:
            errors.append(f"p{partition}: offset {offset} differs: log {record} table {row.record}")
    return compared


def transaction_outcomes(partition: int, table: Mapping[int, Row], errors: list[str]) -> set[int]:
    """The offsets of aborted data, derived from the table's own markers: a transactional
    record belongs to its producer's next marker (ABORT or COMMIT); the `aborted` column must
    agree. Records whose marker is past the table's end are undecided here and skipped."""
    open_by_producer: dict[int, list[int]] = defaultdict(list)
    aborted: set[int] = set()
    for offset in sorted(table):
        row = table[offset]
        if not row.is_transactional:
            continue
        if not row.is_control:
            open_by_producer[row.producer_id].append(offset)
            continue
        kind = _control_type(row.record.key)
        for data in open_by_producer.pop(row.producer_id, []):
            if kind == 0:
                aborted.add(data)
            if table[data].aborted != (kind == 0):
                errors.append(
                    f"p{partition}: offset {data} has aborted={table[data].aborted} in the table "
                    f"but its transaction's marker at {offset} is "
                    f"{'ABORT' if kind == 0 else 'COMMIT'}"
                )
    return aborted


def check_partition(
    partition: int,
    *,
    uncommitted: Sequence[Record],
    committed: Sequence[Record],
    rows: Sequence[Row],
    committed_view_offsets: Iterable[int],
    txn_version: int | None,
) -> tuple[PartitionReport, list[str]]:
    """Every check of one partition (module doc); returns its report and the errors found.
    `committed_view_offsets` are the partition's offsets the table's committed view holds."""
    errors: list[str] = []
    report = PartitionReport(partition, consumed=len(uncommitted), committed=len(committed))
    table = _table_shape(partition, rows, errors)
    report.rows = len(rows)
    report.control_rows = sum(r.is_control for r in table.values())
    report.aborted_rows = sum(r.aborted and not r.is_control for r in table.values())
    report.txn_version = txn_version
    by_offset = {r.offset: r for r in uncommitted}
    if len(by_offset) != len(uncommitted):
        errors.append(f"p{partition}: the consumer got an offset twice")
    if uncommitted:
        report.first_consumed_offset = min(by_offset)
    if not table:
        return report, errors
    start, end = min(table), max(table) + 1
    report.table_start_offset, report.table_end_offset = start, end
    if txn_version is not None and txn_version != end:
        errors.append(
            f"p{partition}: app transaction version {txn_version} but the rows end at {end}"
        )
    if txn_version is None:
        errors.append(f"p{partition}: rows up to {end} but no app transaction for the partition")
    consumed_end = max(by_offset, default=-1) + 1
    low = max(start, report.first_consumed_offset or 0)
    window = range(low, min(end, max(consumed_end, low)))
    # the table may hold offsets above the last consumed one only as trailing control rows
    for offset in range(max(low, consumed_end), end):
        if offset in table and not table[offset].is_control:
            errors.append(f"p{partition}: data row {offset} is past what the log served")
    report.compared = _against_log(partition, table, by_offset, window, errors)
    aborted = transaction_outcomes(partition, table, errors)
    read_committed = {r.offset for r in committed if low <= r.offset < end}
    for offset in sorted(read_committed & aborted)[:20]:
        errors.append(
            f"p{partition}: a read_committed consumer got offset {offset}, whose transaction "
            "aborted (the fetch's aborted-transactions list missed it)"
        )
    got = {o for o in committed_view_offsets if low <= o < end}
    wanted = read_committed - aborted
    for offset in sorted(wanted - got)[:20]:
        errors.append(f"p{partition}: committed offset {offset} missing from the committed view")
    for offset in sorted(got - read_committed)[:20]:
        errors.append(f"p{partition}: offset {offset} in the committed view, not read_committed")
    return report, errors


# ---------------------------------------------------------------------------------- I/O


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    *,
    isolation_level: str,
    timeout_s: float = 60.0,
) -> dict[int, list[Record]]:
    """Every record of `partitions` from the beginning to their end (librdkafka's EOF: the
    high watermark, or the last stable offset read_committed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {**_CONSUMER, "bootstrap.servers": bootstrap, "isolation.level": isolation_level}
    )
    out: dict[int, list[Record]] = {p: [] for p in partitions}
    pending = set(partitions)
    last_error = None
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: partitions {sorted(pending)} not read to their end in {timeout_s} s "
                    f"({isolation_level}; got {[len(out[p]) for p in sorted(pending)]} records; "
                    f"last error {last_error})"
                )
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(message.partition())
                        continue
                    if error.fatal():
                        raise RuntimeError(f"{topic}: consumer error {error}")
                    last_error = error  # transient (leader moving, broker restarting)
                    continue
                out[message.partition()].append(_record_of(message))
    finally:
        consumer.close()
    return out


def _record_of(message: Any) -> Record:
    kind, timestamp_ms = message.timestamp()
    return Record(
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers=tuple((k, v) for k, v in (message.headers() or ())),
        timestamp_type=1 if kind == 2 else 0,  # librdkafka: 1 create time, 2 log append time
        timestamp_ms=timestamp_ms,
    )


def open_table(location: str, storage_options: Mapping[str, str] | None = None) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(location, storage_options=dict(storage_options or {}))


def table_exists(location: str, storage_options: Mapping[str, str] | None = None) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(location, storage_options=dict(storage_options or {}))


def read_rows(table: Any) -> dict[int, list[Row]]:
    """Every row of the table by partition (the columns the checks need)."""
    import pyarrow.compute as pc

    data = table.to_pyarrow_table(
        columns=[
            "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
            "batch_base_offset", "batch_last_offset_delta", "is_transactional", "is_control",
            "aborted", "producer_id",
        ]
    )  # fmt: skip
    millis = pc.divide(data.column("timestamp").cast("int64"), 1000).to_pylist()
    out: dict[int, list[Row]] = defaultdict(list)
    columns = {name: data.column(name).to_pylist() for name in data.column_names}
    for i, partition in enumerate(columns["partition"]):
        headers = tuple((h["key"], h["value"]) for h in columns["headers"][i] or ())
        record = Record(
            columns["offset"][i],
            columns["key"][i],
            columns["value"][i],
            headers,
            columns["timestamp_type"][i],
            millis[i],
        )
        out[partition].append(
            Row(
                record,
                columns["batch_base_offset"][i],
                columns["batch_last_offset_delta"][i],
                columns["is_transactional"][i],
                columns["is_control"][i],
                columns["aborted"][i],
                columns["producer_id"][i],
            )
        )
    return out


def committed_view(table: Any) -> dict[int, set[int]]:
    """The offsets per partition of the committed view: `COMMITTED_RECORDS_FILTER` as SQL."""
    from deltalake import QueryBuilder

    reader = (
        QueryBuilder()
        .register("topic_table", table)
        .execute(f'SELECT "partition", "offset" FROM topic_table WHERE {COMMITTED_RECORDS_FILTER}')
    )
    out: dict[int, set[int]] = defaultdict(set)
    data = reader.read_all()
    for partition, offset in zip(
        data.column("partition").to_pylist(), data.column("offset").to_pylist(), strict=True
    ):
        out[partition].add(offset)
    return out


def table_topic_id(table: Any) -> str | None:
    """The topic id the table's configuration names (`sparklog.topic.id`), None if it names
    none (deltalake 1.6 refuses table properties outside `delta.*`)."""
    return table.metadata().configuration.get(TOPIC_ID_KEY)


def txn_version(table: Any, partition: int, topic_id: str | uuid.UUID | None = None) -> int | None:
    """The partition's copied end offset per the table's app transaction (None: never);
    `topic_id` defaults to the one the table's configuration names."""
    topic_id = topic_id or table_topic_id(table)
    if topic_id is None:
        return None
    return table.transaction_version(app_id(uuid.UUID(str(topic_id)), partition))


def verify_topic(
    bootstrap: str,
    topic: str,
    location: str,
    *,
    partitions: Sequence[int],
    storage_options: Mapping[str, str] | None = None,
    topic_id: str | uuid.UUID | None = None,
    timeout_s: float = 60.0,
) -> VerificationReport:
    """Consume `partitions` of `topic` read_uncommitted and read_committed and check each
    against the table at `location` (module doc). Call it once producers stopped."""
    report = VerificationReport(topic)
    uncommitted = consume_all(
        bootstrap, topic, partitions, isolation_level="read_uncommitted", timeout_s=timeout_s
    )
    report.consumed = uncommitted
    committed = consume_all(
        bootstrap, topic, partitions, isolation_level="read_committed", timeout_s=timeout_s
    )
    table = open_table(location, storage_options)
    found_id = table_topic_id(table)
    if topic_id is not None and found_id is not None and found_id != str(topic_id):
        report.errors.append(f"the table belongs to topic id {found_id}, the topic is {topic_id}")
    rows, view = read_rows(table), committed_view(table)
    for p in sorted(set(partitions) | set(rows)):
        if p not in partitions:
            report.errors.append(f"the table holds partition {p}, the topic has {partitions}")
            continue
        part, errors = check_partition(
            p,
            uncommitted=uncommitted[p],
            committed=committed[p],
            rows=rows.get(p, []),
            committed_view_offsets=view.get(p, ()),
            txn_version=txn_version(table, p, topic_id),
        )
        report.partitions[p] = part
        report.errors.extend(errors)
    return report


def table_ranges(
    location: str, storage_options: Mapping[str, str] | None = None
) -> dict[int, tuple[int, int]]:
    """[first offset, last offset + 1) of each partition's rows; {} when there is no table."""
    import pyarrow.compute as pc

    if not table_exists(location, storage_options):
        return {}
    data = open_table(location, storage_options).to_pyarrow_table(columns=["partition", "offset"])
    grouped = data.group_by("partition").aggregate([("offset", "min"), ("offset", "max")])
    return {
        p: (low, high + 1)
        for p, low, high in zip(
            grouped.column("partition").to_pylist(),
            pc.cast(grouped.column("offset_min"), "int64").to_pylist(),
            pc.cast(grouped.column("offset_max"), "int64").to_pylist(),
            strict=True,
        )
    }


def wait_for_tier(
    location: str,
    end_offsets: Mapping[int, int],
    *,
    topic_id: str | uuid.UUID | None = None,
    storage_options: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> dict[int, int | None]:
    """Wait until the table's app transaction of every partition reaches `end_offsets`
    (exclusive ends: what the tier must have copied); returns the versions seen."""
    deadline = time.monotonic() + timeout_s
    seen: dict[int, int | None] = dict.fromkeys(end_offsets)
    while True:
        if table_exists(location, storage_options):
            table = open_table(location, storage_options)
            seen = {p: txn_version(table, p, topic_id) for p in end_offsets}
            if all((seen[p] or 0) >= end for p, end in end_offsets.items()):
                return seen
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{location}: the tier did not reach {dict(end_offsets)} in {timeout_s} s "
                f"(copied ends {seen})"
            )
        time.sleep(0.1)


__all__ = [
    "PartitionReport",
    "Record",
    "Row",
    "VerificationReport",
    "check_partition",
    "committed_view",
    "consume_all",
    "open_table",
    "read_rows",
    "table_exists",
    "table_ranges",
    "txn_version",
    "verify_topic",
    "wait_for_tier",
]
