"""Compaction against a model: a compacted log answers like a dict of the latest value per key."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    iter_batches,
)
from sparklog.records.compression import CompressionType
from sparklog.records.control import control_type_of
from sparklog.storage.cleaner import CleanerConfig
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.log_cleaner import LogCleaner

NOW = 1_700_000_000_000
RETENTION_MS = 5_000
TP = ("t", 0)

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
values = st.one_of(st.none(), st.binary(max_size=24))
record_lists = st.lists(st.tuples(keys, values), min_size=1, max_size=4)
codecs = st.sampled_from(
    [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD]
)


def config(segment_bytes: int) -> LogConfig:
    return LogConfig.from_properties(
        {
            "segment.bytes": segment_bytes,
            "index.interval.bytes": 64,
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": 0.0,
            "delete.retention.ms": RETENTION_MS,
        }
    )


def all_records(log: Log):
    data = log.read(log.log_start_offset, 1 << 26).records
    return [
        (r.offset, r.key, r.value)
        for b in iter_batches(data)
        if not b.header.is_control
        for r in b.records()
    ]


def last_wins(recs) -> dict:
    out = {}
    for _, key, value in recs:
        out[key] = value
    return out


def live(latest: dict) -> dict:
    return {k: v for k, v in latest.items() if v is not None}


def check_against_original(recs, original: dict) -> None:
    """Offsets strictly increase and every surviving record is the one written there."""
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(set(offsets))
    for offset, key, value in recs:
        assert original[offset] == (key, value)


def clean(log: Log, cleaner: LogCleaner, now_ms: int):
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    return cleaner.clean_once(now_ms)


@SETTINGS
@given(
    batches=st.lists(st.tuples(record_lists, codecs), min_size=1, max_size=40),
    segment_bytes=st.integers(min_value=150, max_value=900),
    roll_first=st.booleans(),
    small_map=st.booleans(),
)
def test_compacted_log_answers_like_a_dict(batches, segment_bytes, roll_first, small_map):
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", config(segment_bytes), now_ms=NOW)
        original: dict[int, tuple] = {}
        for pairs, codec in batches:
            data = build_batch([SimpleRecord(v, k, NOW) for k, v in pairs], compression=codec)
            first = log.append_as_leader(data, 0, NOW).first_offset
            for i, (k, v) in enumerate(pairs):
                original[first + i] = (k, v)
        if roll_first:
            log.roll(NOW)
        log.update_high_watermark(log.log_end_offset)
        model = last_wins((o, k, v) for o, (k, v) in sorted(original.items()))
        untouched = {s.base_offset: s.read_bytes(0, s.size_bytes) for s in log.segments}
        dedupe = 8 * 130 if small_map else 1 << 20
        cleaner = LogCleaner(
            CleanerConfig(dedupe_buffer_size=dedupe, io_buffer_size=256), persist_checkpoints=False
        )
        cleaner.add_log(log, TP)

        result = cleaner.clean_once(NOW)
        recs = all_records(log)
        check_against_original(recs, original)
        assert last_wins(recs) == model  # tombstones still there, as None
        assert cleaner.statistics()["errors"] == []
        if result is not None:
            end = result.end_offset
            below = [k for o, k, _ in recs if o < end]
            assert len(below) == len(set(below))  # the cleaned range holds one record per key
            for segment in log.segments:  # segments above the cleaned range are untouched
                if segment.base_offset >= end:
                    assert (
                        segment.read_bytes(0, segment.size_bytes) == untouched[segment.base_offset]
                    )

        # After the delete horizon, a later round drops every tombstone the first one kept.
        last_offset = {k: o for o, (k, _) in original.items()}
        stamped = {k for k, v in model.items() if v is None and result and last_offset[k] < end}
        log.append_as_leader(build_batch([SimpleRecord(b"x", b"filler", NOW)]), 0, NOW)
        while clean(log, cleaner, NOW + RETENTION_MS) is not None:
            pass
        recs = all_records(log)
        check_against_original(recs[:-1], original)
        expected = {k: v for k, v in model.items() if k not in stamped}
        assert last_wins(recs) == {**expected, b"filler": b"x"}

        # Reopening reads the same bytes.
        before = log.read(0, 1 << 26).records
        log.close()
        reopened = Log.open(Path(tmp) / "t-0", config(segment_bytes), now_ms=NOW)
        assert reopened.read(0, 1 << 26).records == before
        reopened.close()


# -- transactions ------------------------------------------------------------------------------

PRODUCERS = (1, 2, 3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.sampled_from(PRODUCERS), record_lists),
        st.tuples(st.just("txn"), st.sampled_from(PRODUCERS), record_lists),
        st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
    ),
    min_size=1,
    max_size=40,
)


def write_marker(log: Log, producer_id: int, commit: bool) -> None:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    data = build_end_txn_marker_batch(
        EndTransactionMarker(kind, 0),
        producer_id=producer_id,
        producer_epoch=0,
        timestamp_ms=NOW,
        base_offset=log.log_end_offset,
        partition_leader_epoch=0,
    )
    log.append_as_follower(data, NOW)


def read_committed(log: Log):
    """What a read_committed consumer sees (Kafka's `Fetcher` aborted-transaction filter)."""
    fetched = log.read(0, 1 << 26, upper_bound_offset=log.last_stable_offset, include_aborted=True)
    aborted = sorted(fetched.aborted_transactions, key=lambda a: a.first_offset)
    active: set[int] = set()
    out = []
    for batch in iter_batches(fetched.records):
        h = batch.header
        while aborted and aborted[0].first_offset <= h.last_offset:
            active.add(aborted.pop(0).producer_id)
        records = batch.records()
        if h.is_control:
            if records and control_type_of(records[0].key) == ControlRecordType.ABORT:
                active.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in active:
            continue
        out.extend((r.offset, r.key, r.value) for r in records)
    return out


@SETTINGS
@given(
    operations=ops,
    closing=st.lists(st.booleans(), min_size=3, max_size=3),
    segment_bytes=st.integers(min_value=150, max_value=700),
)
def test_compaction_of_transactions_matches_read_committed(operations, closing, segment_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", config(segment_bytes), now_ms=NOW)
        sequence = dict.fromkeys(PRODUCERS, 0)
        open_txn: dict[int, list[int]] = {}  # producer -> offsets of its undecided records
        committed: list[tuple] = []  # (offset, key, value) a read_committed reader sees
        aborted_offsets: set[int] = set()
        values_at: dict[int, tuple] = {}

        def end(producer: int, commit: bool) -> None:
            offsets = open_txn.pop(producer)
            if commit:
                committed.extend((o, *values_at[o]) for o in offsets)
            else:
                aborted_offsets.update(offsets)
            write_marker(log, producer, commit)

        for kind, producer, arg in operations:
            if kind == "end":
                if producer in open_txn:
                    end(producer, arg)
                continue
            transactional = kind == "txn"
            if not transactional and producer in open_txn:
                continue  # a transactional producer writes only inside its transaction
            data = build_batch(
                [SimpleRecord(v, k, NOW) for k, v in arg],
                producer_id=producer,
                producer_epoch=0,
                base_sequence=sequence[producer],
                is_transactional=transactional,
            )
            sequence[producer] += len(arg)
            first = log.append_as_leader(data, 0, NOW).first_offset
            offsets = list(range(first, first + len(arg)))
            values_at.update(zip(offsets, arg, strict=True))
            if transactional:
                open_txn.setdefault(producer, []).extend(offsets)
            else:
                committed.extend((o, *values_at[o]) for o in offsets)
        for producer, commit in zip(PRODUCERS, closing, strict=True):
            if producer in open_txn:
                end(producer, commit)
        committed.sort()
        model = last_wins(committed)

        cleaner = LogCleaner(CleanerConfig(io_buffer_size=200), persist_checkpoints=False)
        cleaner.add_log(log, TP)
        for now_ms in (NOW, NOW + RETENTION_MS, NOW + 2 * RETENTION_MS):
            clean(log, cleaner, now_ms)
            assert cleaner.statistics()["errors"] == []
            seen = read_committed(log)
            # A tombstone may be gone once its delete horizon passed: compare live values.
            assert live(last_wins(seen)) == live(model)
            assert set(last_wins(seen)) <= set(model)
            assert not aborted_offsets & {o for o, _, _ in all_records(log)}
            assert [o for o, _, _ in seen] == sorted({o for o, _, _ in seen})
            log.append_as_leader(build_batch([SimpleRecord(b"x", b"filler", NOW)]), 0, NOW)
            model[b"filler"] = b"x"
