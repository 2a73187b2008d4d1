"""The streaming source's lag metrics computed from a progress (`spark.progress`)."""

from __future__ import annotations

import json

import pytest

from sparklog.spark.progress import offsets_behind_latest, source_metrics


def test_offsets_behind_latest_is_sparks_kafka_source_arithmetic():
    consumed = {"a": {"0": 10, "1": 40}}
    latest = {"a": {"0": 50, "1": 40}, "b": {"0": 7}}  # b not in the batch yet: from 0
    assert offsets_behind_latest(consumed, latest) == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "40",
        "avgOffsetsBehindLatest": str(47 / 3),
    }
    assert offsets_behind_latest(consumed, {}) == {}


def test_source_metrics_reads_sparklog_sources_of_a_progress():
    progress = {
        "sources": [
            {"endOffset": {"t": {"0": 300}}, "latestOffset": {"t": {"0": 1000}}},
            {"endOffset": "42", "latestOffset": None},  # another source: left out
            {"endOffset": json.dumps({"t": {"0": 5}}), "latestOffset": None},  # no latest yet
        ]
    }
    assert source_metrics(progress) == [
        {
            "minOffsetsBehindLatest": "700",
            "maxOffsetsBehindLatest": "700",
            "avgOffsetsBehindLatest": "700.0",
        },
        {},
    ]
    with pytest.raises(TypeError, match="not a streaming progress"):
        source_metrics(3)
