"""Kafka's murmur2 partitioner hash: scalar vectors and the vectorized column version."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparklog.records.murmur2 import (
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
)

# Kafka's UtilsTest.testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_kafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_vectorized_matches_kafka_vectors() -> None:
    hashes, valid = murmur2_array(pa.array(list(KAFKA_VECTORS), pa.binary()))
    assert hashes.tolist() == list(KAFKA_VECTORS.values())
    assert valid.all()


def test_partition_for_key_is_to_positive_mod_n() -> None:
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)


@pytest.mark.parametrize("offset", [0, 3])
def test_vectorized_equals_scalar_on_random_keys(offset: int) -> None:
    rng = np.random.default_rng(42)
    keys = [
        None if rng.random() < 0.1 else rng.bytes(int(rng.integers(0, 41))) for _ in range(3000)
    ]
    column = pa.array(keys, pa.binary()).slice(offset)
    keys = keys[offset:]
    hashes, valid = murmur2_array(column)
    assert valid.tolist() == [k is not None for k in keys]
    assert [h for h, k in zip(hashes.tolist(), keys, strict=True) if k is not None] == [
        murmur2(k) for k in keys if k is not None
    ]
    for n in (1, 6, 1000):
        expected = [-1 if k is None else partition_for_key(k, n) for k in keys]
        assert partitions_for_keys(column, n).tolist() == expected


def test_every_length_and_tail() -> None:
    data = bytes(range(256)) * 2
    keys = [data[i : i + n] for n in range(0, 45) for i in (0, 1, 2, 3)]
    hashes, _ = murmur2_array(pa.array(keys, pa.binary()))
    assert hashes.tolist() == [murmur2(k) for k in keys]


def test_string_large_and_empty_columns() -> None:
    words = ["", "a", "héllo", "kafka-key-123"]
    expected = [murmur2(w.encode()) for w in words]
    assert murmur2_array(pa.array(words))[0].tolist() == expected
    assert murmur2_array(pa.array(words, pa.large_string()))[0].tolist() == expected
    assert murmur2_array(pa.chunked_array([words[:2], words[2:]]))[0].tolist() == expected
    assert partitions_for_keys(pa.array([], pa.binary()), 3).tolist() == []
    assert partitions_for_keys(pa.nulls(2, pa.binary()), 3).tolist() == [-1, -1]
    assert partitions_for_keys(pa.array([b""]), 3).tolist() == [partition_for_key(b"", 3)]
    assert partitions_for_keys(pa.array([b"k"]), 5).dtype == np.int32
