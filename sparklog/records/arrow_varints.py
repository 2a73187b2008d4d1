"""Kafka's varints for many records at once (the vectorized half of `arrow_encode`).

A field is a pair (zigzag values as uint64, widths in bytes: an array, or one int when every
row has the same width), `Varints`. `ragged` writes several fields row by row into one binary
array: per field the bytes of all rows go into a (rows, max width) matrix column by column,
with the continuation bit on every byte but a row's last, and a mask keeps each row's first
`width` bytes; rows of one width need no mask and are one reshape. Kafka's encoding:
`ByteUtils.writeVarint`/`writeVarlong` (zigzag, 7 bits a byte, least significant first).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

Varints = tuple[np.ndarray, np.ndarray | int]  # (zigzag values, widths: array or one int)


def zigzag(values: np.ndarray) -> np.ndarray:
    """Zigzag of int64 values as uint64 (Kafka's `ByteUtils.writeVarlong` mapping)."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def varint_widths(z: np.ndarray) -> np.ndarray:
    """Encoded size in bytes (1..10) of each zigzagged value (int64)."""
    widths = np.ones(len(z), dtype=np.int64)
    top = int(z.max(initial=0))
    shift = 7
    while shift < 64 and top >> shift:
        widths += z >= np.uint64(1 << shift)
        shift += 7
    return widths


def varint_field(values: np.ndarray) -> Varints:
    """(zigzag values, widths) of one varint field; widths an int when all equal."""
    z = zigzag(values)
    return z, uniform(varint_widths(z))


def length_widths(lengths: np.ndarray) -> np.ndarray:
    """Varint sizes of lengths >= -1 (zigzag 2 * length; -1 is 1), int64."""
    widths = np.ones(len(lengths), dtype=np.int64)
    top = int(lengths.max(initial=0))
    for bits in (6, 13, 20, 27):
        if top < 1 << bits:
            break
        widths += lengths >= 1 << bits
    return widths


def uniform(widths: np.ndarray) -> np.ndarray | int:
    """`widths` as one int when all are equal (no ragged selection needed then)."""
    if len(widths) and widths.min() == widths.max():
        return int(widths[0])
    return widths


def widths_part(widths: np.ndarray | int, lo: int, hi: int) -> np.ndarray | int:
    """The widths of rows lo..hi (one int when they are all equal)."""
    return widths if isinstance(widths, int) else uniform(widths[lo:hi])


def lengths_field(lengths: np.ndarray, widths: np.ndarray | int) -> Varints:
    return zigzag(lengths), widths


def ragged(fields: list[Varints], skip: int = 0) -> pa.Array:
    """A binary array whose row i is the varints of each field's row i, back to back
    (leaving out the first `skip` bytes of row 0)."""
    n = max(len(z) for z, _ in fields)
    max_widths = [w if isinstance(w, int) else int(w.max(initial=1)) for _, w in fields]
    matrix = np.empty((n, sum(max_widths)), dtype=np.uint8)
    mask: np.ndarray | None = None
    col = 0
    for (z, widths), wmax in zip(fields, max_widths, strict=True):
        fixed = isinstance(widths, int)
        if not fixed and mask is None:
            mask = np.ones(matrix.shape, dtype=bool)
        for k in range(wmax):
            byte = (z >> np.uint64(7 * k)).astype(np.uint8) if k else z.astype(np.uint8)
            if k + 1 < wmax:  # bytes before the last carry the continuation bit
                byte |= np.uint8(0x80)
                if not fixed:
                    byte &= np.where(widths > k + 1, np.uint8(0xFF), np.uint8(0x7F))
            matrix[:, col + k] = byte  # the last byte is < 0x80: z < 2**(7 * wmax)
            if not fixed and k:
                assert mask is not None  # made above for every field with varying widths
                mask[:, col + k] = widths > k
        col += wmax
    row_len = sum(w for _, w in fields)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = skip
    if isinstance(row_len, int):
        offsets[1:] = np.arange(1, n + 1, dtype=np.int32) * row_len
        data = matrix.reshape(-1)
    else:
        np.cumsum(row_len, out=offsets[1:])
        data = matrix[mask]
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
