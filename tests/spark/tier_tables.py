"""Topic tables for the Spark tests, written the way the brokers' remote log manager writes them.

A test copies a partition's log into its table itself (the broker's copy task is tested on its
own): the batches of the partition's segment files on disk, as they are, and the aborted
transactions of its transaction indexes, go to `DeltaTopicTable.append` as `SegmentUpload`s
(several commits, each holding a slice of every partition), so the rows are the tier's own
codec's and the commits carry its app transactions and ranges.
"""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

from sparklog.storage.remote.table import open_topic_table
from sparklog.storage.remote.tier import SegmentUpload
from sparklog.storage.txn_index import AbortedTxn, TransactionIndex

_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA_AT = 23


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    (found,) = [p for p in Path(data_dir).rglob(f"{topic}-{partition}") if p.is_dir()]
    return found


def log_batches(directory: Path) -> list[tuple[int, int, bytes]]:
    """(base offset, next offset, bytes) of every batch in the partition's segments."""
    out = []
    for log in sorted(directory.glob("*.log")):
        data = log.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            base, length = _HEAD.unpack_from(data, pos)
            if length <= 0:
                break
            at = pos + _LAST_OFFSET_DELTA_AT
            (delta,) = struct.unpack_from(">i", data, at)
            out.append((base, base + delta + 1, data[pos : pos + 12 + length]))
            pos += 12 + length
    return out


def aborted_txns(directory: Path) -> list[AbortedTxn]:
    return [
        a
        for index in sorted(directory.glob("*.txnindex"))
        for a in TransactionIndex(index, int(index.stem)).all_aborted()
    ]


def write_topic_table(
    data_dir: Path,
    root: str,
    topic: str,
    ends: dict[int, int],
    *,
    commits: int = 3,
    topic_id: uuid.UUID | None = None,
) -> dict[int, int]:
    """Copy the whole batches below `ends[p]` of each partition into the topic's table under
    `root`, in `commits` commits; returns each partition's copied end. `topic_id` is the
    topic's (the reader ignores a table of another id)."""
    table = open_topic_table(root, topic, topic_id or uuid.uuid4())
    slices: dict[int, list[list[tuple[int, int, bytes]]]] = {}
    aborted: dict[int, list[AbortedTxn]] = {}
    for p, end in ends.items():
        directory = partition_dir(data_dir, topic, p)
        batches = [b for b in log_batches(directory) if b[1] <= end]
        assert batches, f"{topic}-{p} has no whole batch below {end}"
        cut = [len(batches) * i // commits for i in range(commits + 1)]
        slices[p] = [batches[a:b] for a, b in zip(cut, cut[1:], strict=False)]
        aborted[p] = aborted_txns(directory)
    for i in range(commits):
        uploads = []
        for p, pieces in slices.items():
            piece = pieces[i]
            if not piece:
                continue
            lo, hi = piece[0][0], piece[-1][1]
            uploads.append(
                SegmentUpload(
                    p,
                    lo,
                    hi,
                    b"".join(b for _, _, b in piece),
                    tuple(a for a in aborted[p] if a.first_offset < hi and a.last_offset >= lo),
                )
            )
        table.append(uploads)
    return {p: table.copied_end_offset(p) for p in ends}
