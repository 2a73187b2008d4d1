"""Find and parse the records of many v2 records sections at once, without a loop per record.

Theory of operation. Record boundaries form a chain (each record's length varint says where the
next starts), so instead of walking it:

1. Every zero byte inside a section that follows a byte in 1..0x7f is a possible attributes
   byte (producers always write 0 there, and the canonical length varint before it ends in a
   nonzero byte below 0x80). Reading the length varint backwards from it, every width the
   continuation bits allow gives a possible record [start, end): a *pair*.
2. Pairs that do not chain both ways (end where another starts or at the section end; start
   where another ends or at the section start) are dropped (`_link`, two rounds, which leaves
   about no bogus pair). If what is left tiles the section exactly with recordsCount pairs,
   a sequential reader starting at the section start reads exactly those records (`_tiled`).
3. Only those records are parsed (tsDelta, offsetDelta, key, value, headers), vectorized; every
   field must end exactly at the record end.
4. A section left untiled (a value embedding bytes that read as records) is resolved by
   pointer doubling from its section start over all its pairs; failing that, or when a record
   fails to parse, the caller decodes the batch with the per-record decoder, which raises the
   CorruptRecordError a sequential reader would (or decodes legal oddities no producer writes:
   nonzero record attributes, over-long varints, more than `_FAST_HEADER_ROUNDS` headers).

Everything runs on work groups of whole batches of about a megabyte so temporaries stay in
cache; per-candidate costs are numpy gathers and compares.
"""

from __future__ import annotations

import numpy as np

_FAST_HEADER_ROUNDS = 64  # records with more headers make their batch take the per-record path
_MIN_RECORD_BODY = 6  # attributes, tsDelta, offsetDelta, keyLen, valueLen, headerCount
_LINK_ROUNDS = 2  # then `_tiled` decides; a section it rejects is resolved by doubling


class Fields:
    """Parsed records (one row each): positions in the data and decoded fields.

    A length of -1 means null; `end` is where the record's last header ends.
    """

    __slots__ = (
        "attributes_pos",
        "end",
        "ts_delta",
        "offset_delta",
        "key_start",
        "key_len",
        "value_start",
        "value_len",
        "header_count",
        "headers_start",
        "ok",
    )
    attributes_pos: np.ndarray
    end: np.ndarray
    ts_delta: np.ndarray
    offset_delta: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    headers_start: np.ndarray
    ok: np.ndarray

    def take(self, rows: np.ndarray) -> Fields:
        out = Fields()
        for name in self.__slots__:
            setattr(out, name, getattr(self, name).take(rows))
        return out

    @classmethod
    def concat(cls, parts: list[Fields]) -> Fields:
        out = cls()
        for name in cls.__slots__:
            setattr(out, name, np.concatenate([getattr(p, name) for p in parts]))
        return out

    def __len__(self) -> int:
        return len(self.end)


class Marks:
    """Two reusable byte maps for `_link`; a new tag per use saves clearing them."""

    def __init__(self, size: int) -> None:
        self._allocate(size)

    def _allocate(self, size: int) -> None:
        self.starts = np.zeros(size, dtype=np.uint8)
        self.ends = np.zeros(size, dtype=np.uint8)
        self.tag = 0

    def ensure(self, size: int) -> None:
        """Make the maps cover `size` positions."""
        if len(self.starts) < size:
            self._allocate(max(size, 2 * len(self.starts)))

    def next_tag(self) -> np.uint8:
        self.tag += 1
        if self.tag == 256:
            self.starts[:] = 0
            self.ends[:] = 0
            self.tag = 1
        return np.uint8(self.tag)


def scan_group(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray, marks: Marks
) -> tuple[Fields, np.ndarray, list[int]]:
    """The records of the sections data[starts[i]:ends[i]] holding counts[i] records each.

    Returns (fields in position order, section index of each record, sections to decode with
    the per-record decoder instead).
    """
    pairs = _length_pairs(data, starts, ends)
    linked = _link(pairs, starts, ends, marks)
    if len(linked.start) > 1 and (np.diff(linked.start) < 0).any():
        linked = linked.take(np.argsort(linked.start, kind="stable"))  # grouped by width
    good = _tiled(linked, starts, ends, counts)
    if not good.all():
        linked = linked.take(np.flatnonzero(good.take(linked.batch)))
    fields = _parse_records(data, linked)
    owner = linked.batch
    if not fields.ok.all():
        good[owner[~fields.ok]] = False
        keep = np.flatnonzero(good.take(owner))
        fields, owner = fields.take(keep), owner.take(keep)
    retry = np.flatnonzero(~good & ((counts > 0) | (ends != starts)))
    parts, owners, slow = [fields], [owner], []
    if retry.size:
        by_batch = pairs.take(np.argsort(pairs.batch, kind="stable"))
        bounds = np.searchsorted(by_batch.batch, np.arange(len(starts) + 1))
    for b in retry.tolist():
        mine = by_batch.take(np.arange(bounds[b], bounds[b + 1]))
        chain = _chain_by_doubling(data, mine, int(starts[b]), int(ends[b]), int(counts[b]))
        if chain is None:
            slow.append(b)
        else:
            parts.append(chain)
            owners.append(np.full(len(chain), b, dtype=np.int64))
    if len(parts) > 1:  # sections lie in batch order: position order is batch order
        fields, owner = Fields.concat(parts), np.concatenate(owners)
        order = np.argsort(fields.attributes_pos, kind="stable")
        fields, owner = fields.take(order), owner.take(order)
    return fields, owner, slow


def walk_headers(data: np.ndarray, f: Fields, rows: np.ndarray, limit, max_rounds: int) -> list:
    """Walk the headers of `rows`, one header index per round, setting their `end`.

    A row whose headers overrun `limit` (per row) or need more than `max_rounds` rounds gets
    ok=False. Returns, per round h, (rows having a header h, key_start, key_len, value_start,
    value_len) for building a headers column.
    """
    count = f.header_count
    pos = f.headers_start.take(rows)
    fits = count.take(rows) <= max_rounds
    active = np.flatnonzero(fits)
    rounds = []
    h = 0
    while active.size:
        at = pos.take(active)
        key_len, width, ok = varints(data, at, 5)
        key_start = at + width
        at = key_start + np.maximum(key_len, 0)
        value_len, width, ok2 = varints(data, at, 5)
        value_start = at + width
        at = value_start + np.maximum(value_len, 0)
        ok &= ok2 & (key_len >= 0) & (value_len >= -1) & (at <= limit.take(active))
        pos[active] = at
        rounds.append((rows.take(active), key_start, key_len, value_start, value_len))
        fits[active[~ok]] = False
        h += 1
        active = active[ok & (count.take(rows.take(active)) > h)]
    f.end[rows] = pos
    f.ok[rows] &= fits
    return rounds


def varints(data: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple:
    """Zigzag varints at `pos` as Kafka's `ByteUtils.readVarint/readVarlong` reads them.

    Returns (value int64, width, ok); width and ok are scalars when the same for all. ok is
    False where the varint runs past `max_bytes` (5 for a varint, 10 for a varlong). Reads
    past the end of `data` see its last byte; callers reject such records as overrunning.
    """
    b = data.take(pos, mode="clip")
    more = b >= 0x80
    if not more.any():
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), 1, True
    raw = (b & 0x7F).astype(np.uint64)
    width = more.astype(np.int64) + 1
    ok: bool | np.ndarray = True
    k = 1
    while k < max_bytes and more.sum() * 4 > len(pos):  # most continue: whole-array steps
        b = data.take(pos + k, mode="clip")
        raw |= ((b & 0x7F).astype(np.uint64) << np.uint64(7 * k)) * more
        more &= b >= 0x80
        width += more
        k += 1
    rows = np.flatnonzero(more)
    while rows.size and k < max_bytes:  # the few that continue: steps on their rows only
        b = data.take(pos.take(rows) + k, mode="clip")
        raw[rows] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        rows = rows[b >= 0x80]
        width[rows] += 1
        k += 1
    if rows.size:
        ok = np.ones(len(pos), dtype=bool)
        ok[rows] = False  # the varints still unfinished after max_bytes bytes
    if max_bytes == 5:
        raw &= np.uint64(0xFFFFFFFF)
    value = (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)
    return value, width, ok


# --------------------------------------------------------------------------- finding records


class _Pairs:
    """Possible records: a length varint [start, attributes) and the record's `end`."""

    __slots__ = ("attributes", "batch", "end", "start")
    attributes: np.ndarray
    batch: np.ndarray
    end: np.ndarray
    start: np.ndarray

    def take(self, rows: np.ndarray) -> _Pairs:
        out = _Pairs()
        for name in self.__slots__:
            setattr(out, name, getattr(self, name).take(rows))
        return out


def _length_pairs(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> _Pairs:
    """Every (length varint, attributes byte) reading that could be a record (step 1)."""
    first, last = int(starts[0]), int(ends[-1])
    q = _zero_positions(data, first, last)
    # one section: its bounds are two numbers; many: each candidate's section, gathered
    batch = np.searchsorted(starts, q, side="right") - 1 if len(starts) > 1 else None
    section_start: int | np.ndarray = first if batch is None else starts.take(batch)
    limit: int | np.ndarray = last if batch is None else ends.take(batch)
    before = data.take(q - 1, mode="clip")
    inside = np.flatnonzero(
        ((before - np.uint8(1)) < np.uint8(0x7F)) & (q > section_start) & (q < limit)
    )
    q = q.take(inside)
    if batch is not None:
        batch = batch.take(inside)
        section_start, limit = starts.take(batch), ends.take(batch)
    raw = before.take(inside).astype(np.int64)
    room = limit - q
    more = np.ones(len(q), dtype=bool)
    longest = int((ends - starts).max())
    parts = []
    for width in range(1, 4 + (longest >= 1 << 20) + (longest >= 1 << 27)):
        if width > 1:
            b = data.take(q - width, mode="clip")
            more &= (b >= 0x80) & (q - width >= section_start)
            raw = (raw << 7) | (b & 0x7F)
        length = (raw >> 1) ^ -(raw & 1)
        ok = np.flatnonzero(more & (length >= _MIN_RECORD_BODY) & (length <= room))
        parts.append((ok, width, length.take(ok)))
    pairs = _Pairs()
    rows = np.concatenate([r for r, _, _ in parts])
    pairs.attributes = q.take(rows)
    pairs.batch = np.zeros(len(rows), dtype=np.int64) if batch is None else batch.take(rows)
    pairs.start = pairs.attributes - np.concatenate([np.full(len(r), w) for r, w, _ in parts])
    pairs.end = pairs.attributes + np.concatenate([n for _, _, n in parts])
    return pairs


def _zero_positions(data: np.ndarray, first: int, last: int) -> np.ndarray:
    """Positions in data[first+1:last] of zero bytes that may be attributes bytes, ascending.

    Zeros are usually rare in values and all of them are returned (callers filter). Where they
    are not (binary values, zero padding), the byte-level filter runs first: a length varint
    must end right before the zero, and be 1 byte of an even length >= 6 or longer.
    """
    seg = data[first:last]
    zero = seg == 0
    if np.count_nonzero(zero) * 16 <= len(seg):
        return np.flatnonzero(zero) + first
    zero[0] = False
    before = seg[:-1]
    one_byte = (before >= _MIN_RECORD_BODY * 2) & (before < 0x80) & ((before & 1) == 0)
    longer = np.zeros(len(before), dtype=bool)
    longer[1:] = (before[1:] - np.uint8(1) < np.uint8(0x7F)) & (seg[:-2] >= 0x80)
    zero[1:] &= one_byte | longer
    return np.flatnonzero(zero) + first


def _link(pairs: _Pairs, starts: np.ndarray, ends: np.ndarray, marks: Marks) -> _Pairs:
    """Drop pairs that do not chain both ways, for `_LINK_ROUNDS` rounds (step 2)."""
    first = int(starts[0])
    single = len(starts) == 1
    start, end, batch = pairs.start, pairs.end, pairs.batch
    kept = None
    for _ in range(_LINK_ROUNDS):
        tag = marks.next_tag()
        marks.starts[start - first] = tag
        marks.ends[end - first] = tag
        section_start = first if single else starts.take(batch)
        section_end = int(ends[0]) if single else ends.take(batch)
        chained = (marks.starts.take(end - first) == tag) | (end == section_end)
        chained &= (marks.ends.take(start - first) == tag) | (start == section_start)
        if chained.all():
            break
        rows = np.flatnonzero(chained)
        kept = rows if kept is None else kept.take(rows)
        start, end = start.take(rows), end.take(rows)
        if not single:
            batch = batch.take(rows)
    return pairs if kept is None else pairs.take(kept)


def _tiled(pairs: _Pairs, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per section: are its pairs (sorted by start) exactly recordsCount records, the first at
    the section start, each ending where the next starts, the last at the section end?

    Then a sequential reader, starting at the section start, reads exactly these records.
    """
    batch = pairs.batch
    good = (np.bincount(batch, minlength=len(starts)) == counts) & ((counts > 0) | (ends == starts))
    if len(batch):
        same = batch[1:] == batch[:-1]
        good[batch[1:][same & (pairs.start[1:] != pairs.end[:-1])]] = False
        first = np.concatenate([[True], ~same])
        last = np.concatenate([~same, [True]])
        good[batch[first][pairs.start[first] != starts.take(batch[first])]] = False
        good[batch[last][pairs.end[last] != ends.take(batch[last])]] = False
    return good


def _parse_records(data: np.ndarray, pairs: _Pairs) -> Fields:
    """Parse the records `pairs` delimit (step 3); ok: every field ends at the record end."""
    f = Fields()
    f.attributes_pos = pairs.attributes
    pos = pairs.attributes + 1
    f.ts_delta, width, ok = varints(data, pos, 10)
    pos = pos + width
    f.offset_delta, width, ok2 = varints(data, pos, 5)
    ok &= ok2
    pos += width
    f.key_len, width, ok2 = varints(data, pos, 5)
    ok &= ok2 & (f.key_len >= -1)
    f.key_start = pos + width
    pos = f.key_start + np.maximum(f.key_len, 0)
    f.value_len, width, ok2 = varints(data, pos, 5)
    ok &= ok2 & (f.value_len >= -1)
    f.value_start = pos + width
    pos = f.value_start + np.maximum(f.value_len, 0)
    f.header_count, width, ok2 = varints(data, pos, 5)
    ok &= ok2 & (f.header_count >= 0)
    f.headers_start = pos + width
    f.end = f.headers_start.copy()
    f.ok = ok & (f.end <= pairs.end)
    has_headers = np.flatnonzero(f.ok & (f.header_count > 0))
    if has_headers.size:
        walk_headers(data, f, has_headers, pairs.end.take(has_headers), _FAST_HEADER_ROUNDS)
    f.ok &= f.end == pairs.end
    return f


def _chain_by_doubling(data: np.ndarray, pairs: _Pairs, start: int, end: int, count: int):
    """The records of a section whose pairs did not settle into exactly its records (step 4),
    or None."""
    chain = _follow_chain(pairs.start, pairs.end, start, end, count)
    if chain is None:
        return None
    records = _parse_records(data, pairs.take(chain))
    return records if records.ok.all() else None


def _follow_chain(
    record_start: np.ndarray, record_end: np.ndarray, start: int, end: int, count: int
) -> np.ndarray | None:
    """Indexes of the `count` records chained from `start` to `end`, by pointer doubling, or
    None when these candidates hold no such chain."""
    if count == 0 or count > len(record_start):  # a corrupt count: no need to look
        return None
    order = np.argsort(record_start, kind="stable")
    record_start, record_end = record_start.take(order), record_end.take(order)
    n = len(order)
    if n == 0 or record_start[0] != start:
        return None
    following = np.searchsorted(record_start, record_end)
    linked = record_start.take(np.minimum(following, n - 1)) == record_end
    jump = np.append(np.where(linked & (following < n), following, n), n)  # n: dead end
    chain = np.zeros(1, dtype=np.int64)
    while len(chain) < count:  # chain holds ranks 0..2^k-1; jump advances 2^k records
        chain = np.concatenate([chain, jump.take(chain)])
        jump = jump.take(jump)
    chain = chain[:count]
    if (chain == n).any() or record_end[chain[-1]] != end:
        return None
    return order.take(chain)
