"""Kafka's murmur2 key hash and the default partitioner's key -> partition mapping.

`murmur2` is Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c) returning Java's
signed int; `partition_for_key` is `Utils.toPositive(murmur2(key)) % numPartitions`, what Kafka's
`BuiltInPartitioner.partitionForKey` computes, so keyed records land on the partitions Java,
librdkafka (`murmur2_random`) and aiokafka producers pick. `partitions_for_keys` does the same
for a whole Arrow column at once: the loop runs over 4-byte word index, not over records.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.records import native

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
NULL_KEY_PARTITION = -1  # a null key has no hash partition: the caller picks (sticky) one


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's `Utils.murmur2(data)` as a signed 32-bit int."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        # Java's switch falls through: case 3 -> 2 -> 1, then one multiply.
        h ^= int.from_bytes(data[end4:], "little")
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner assigns to a non-null `key`."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def murmur2_array(keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized `murmur2` over a binary/string Arrow array: (hashes int32, valid bool)."""
    keys = _as_binary(keys)
    n = len(keys)
    valid = np.ones(n, dtype=bool) if keys.null_count == 0 else _valid_mask(keys)
    offsets_type = np.int32 if pa.types.is_binary(keys.type) else np.int64
    offsets: np.ndarray = np.frombuffer(keys.buffers()[1], dtype=offsets_type)[
        keys.offset : keys.offset + n + 1
    ]
    starts = offsets[:-1].astype(np.int64)
    lengths = np.where(valid, offsets[1:] - starts, 0)
    core = native.core()
    if core is not None:
        data = keys.buffers()[2]
        hashes = core.murmur2_hashes(
            data if data is not None else b"", starts.view(np.uint8), lengths.view(np.uint8)
        )
        return np.frombuffer(hashes, dtype="<i4"), valid
    words = _words_view(keys.buffers()[2])
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    length4 = lengths >> 2
    all_rows = int(length4.min(initial=0))
    for i in range(int(length4.max(initial=0))):
        rows = None if i < all_rows else np.flatnonzero(length4 > i)
        k = _read_u32(words, (starts if rows is None else starts[rows]) + 4 * i)
        k *= m
        k ^= k >> np.uint32(_R)
        k *= m
        if rows is None:
            h *= m
            h ^= k
        else:
            h[rows] = (h[rows] * m) ^ k
    rows = np.flatnonzero(lengths & 3)
    if rows.size:
        # Java's switch falls through case 3 -> 2 -> 1: xor the tail bytes little-endian.
        tail_bytes = (lengths[rows] & 3).astype(np.uint32)
        k = _read_u32(words, starts[rows] + (lengths[rows] & ~3))
        k &= (np.uint32(1) << (np.uint32(8) * tail_bytes)) - np.uint32(1)
        h[rows] = (h[rows] ^ k) * m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h.view(np.int32), valid


def partitions_for_keys(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """`partition_for_key` for every key of an Arrow column; null keys get -1 (int32 array)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    hashes, valid = murmur2_array(keys)
    positive = hashes.view(np.uint32) & np.uint32(0x7FFFFFFF)
    partitions = (positive % np.uint32(num_partitions)).astype(np.int32)
    partitions[~valid] = NULL_KEY_PARTITION
    return partitions


def _words_view(data_buf: pa.Buffer | None) -> np.ndarray:
    """Every byte position of `data_buf` as the start of an unaligned little-endian uint32."""
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    if len(data) < 4:
        data = np.concatenate([data, np.zeros(4 - len(data), np.uint8)])
    return np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, strides=(1,))


def _read_u32(words: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """4 bytes from each position; a read that would overrun the end is shifted down instead."""
    last = len(words) - 1
    clipped = np.minimum(pos, last)
    out = words[clipped]
    over = pos - clipped
    if over.any():
        out >>= np.uint32(8) * over.astype(np.uint32)
    return out


def _as_binary(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = pa.concat_arrays(keys.chunks) if keys.num_chunks != 1 else keys.chunk(0)
    if pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type):
        return keys
    if pa.types.is_string(keys.type) or pa.types.is_fixed_size_binary(keys.type):
        return keys.cast(pa.binary())
    if pa.types.is_large_string(keys.type):
        return keys.cast(pa.large_binary())
    if pa.types.is_null(keys.type):
        return pa.nulls(len(keys), pa.binary())
    if pa.types.is_binary_view(keys.type) or pa.types.is_string_view(keys.type):
        return keys.cast(pa.binary())
    raise TypeError(f"keys must be a binary or string Arrow array, got {keys.type}")


def _valid_mask(arr: pa.Array) -> np.ndarray:
    return arr.is_valid().to_numpy(zero_copy_only=False)
