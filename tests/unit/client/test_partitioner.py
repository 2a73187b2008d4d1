"""Partitioners: Kafka's murmur2 for keys, sticky for null keys, round-robin, user callables."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from sparklog.client.config import ConfigError
from sparklog.client.partitioner import (
    BuiltInPartitioner,
    CallablePartitioner,
    RoundRobinPartitioner,
    make_partitioner,
)
from sparklog.records.murmur2 import partition_for_key

from .helpers import cluster


def test_keys_go_where_kafkas_default_partitioner_puts_them():
    c = cluster({"t": [1, 2, 1, 2, 1, 2]})
    p = BuiltInPartitioner(16384)
    keys = [f"key-{i}".encode() for i in range(50)]
    assert [p.partition("t", k, b"v", c) for k in keys] == [partition_for_key(k, 6) for k in keys]
    # Known values from Kafka's Java client (Utils.toPositive(Utils.murmur2(key)) % n).
    assert partition_for_key(b"21", 100) == (-973932308 & 0x7FFFFFFF) % 100


def test_keys_hash_over_all_partitions_even_without_leaders():
    c = cluster({"t": [-1, -1, -1, 1]})
    p = BuiltInPartitioner(16384)
    assert p.partition("t", b"k", None, c) == partition_for_key(b"k", 4)


def test_null_keys_stick_to_one_available_partition_until_batch_size_bytes():
    c = cluster({"t": [1, -1, 2, 1]})
    p = BuiltInPartitioner(100, rng=random.Random(1))
    first = p.partition("t", None, b"v", c)
    assert first in (0, 2, 3)
    for _ in range(3):
        assert p.partition("t", None, b"v", c) == first
        p.on_append("t", first, 30)
    p.on_append("t", first, 10)  # 100 bytes reached: switch
    second = p.partition("t", None, b"v", c)
    assert second != first and second in (0, 2, 3)


def test_ignore_keys_makes_keyed_records_sticky():
    c = cluster({"t": [1, 2, 1, 2]})
    p = BuiltInPartitioner(1000, ignore_keys=True, rng=random.Random(3))
    assert len({p.partition("t", f"k{i}".encode(), None, c) for i in range(20)}) == 1


def test_round_robin_cycles_over_partitions_with_leaders():
    c = cluster({"t": [1, -1, 2]})
    p = RoundRobinPartitioner()
    assert [p.partition("t", b"k", None, c) for _ in range(5)] == [0, 2, 0, 2, 0]


def test_vectorized_keys_equal_the_per_record_partitioner():
    c = cluster({"t": [1, 2, 1, 2, 1]})
    keys = pa.array([f"k{i}".encode() for i in range(200)], pa.binary())
    p = BuiltInPartitioner(16384)
    got = p.partition_array("t", keys, np.full(200, 10), c)
    assert got.tolist() == [partition_for_key(k.as_py(), 5) for k in keys]


def test_vectorized_null_keys_fill_batch_size_chunks_in_turn():
    c = cluster({"t": [1, 2, 1]})
    p = BuiltInPartitioner(100, rng=random.Random(0))
    keys = pa.array([None] * 10 + [b"k"], pa.binary())
    got = p.partition_array("t", keys, np.full(11, 30), c)
    # cumulative sizes 30..300: chunk = cumsum // 100 -> 0,0,0,1,1,1,2,2,2,3
    chunks = got[:10]
    assert len(set(chunks[:3].tolist())) == 1
    assert chunks[2] != chunks[3] and chunks[5] != chunks[6]
    assert chunks[0] == chunks[9]  # three partitions, fourth chunk wraps around
    assert got[10] == partition_for_key(b"k", 3)


def test_vectorized_round_robin_continues_the_counter():
    c = cluster({"t": [1, 2, 1]})
    p = RoundRobinPartitioner()
    assert p.partition("t", None, None, c) == 0
    assert p.partition_array("t", None, np.zeros(4), c).tolist() == [1, 2, 0, 1]
    assert p.partition("t", None, None, c) == 2


def test_make_partitioner_accepts_names_objects_and_callables():
    assert isinstance(make_partitioner(None, batch_size=10), BuiltInPartitioner)
    rr = make_partitioner("org.apache.kafka.clients.producer.RoundRobinPartitioner", batch_size=10)
    assert isinstance(rr, RoundRobinPartitioner)
    sticky = make_partitioner("UniformStickyPartitioner", batch_size=10)
    assert sticky.ignore_keys
    fn = make_partitioner(lambda topic, key, value, n: n - 1, batch_size=10)
    assert isinstance(fn, CallablePartitioner)
    assert fn.partition("t", b"k", b"v", cluster({"t": [1, 1, 1]})) == 2

    class Mine:
        def partition(self, topic, key, value, cluster):
            return 0

    assert isinstance(make_partitioner(Mine, batch_size=10), Mine)
    with pytest.raises(ConfigError, match="partitioner.class: unknown partitioner 'bogus'"):
        make_partitioner("bogus", batch_size=10)
