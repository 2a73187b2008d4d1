"""A Fetch response whose records are file ranges: the pieces the server writes (bytes, then
sendfile ranges) are, joined, byte for byte the response kio encodes with the records inline."""

from __future__ import annotations

import os

import pytest

from sparklog.protocol import codec, kio_build
from sparklog.protocol.file_response import pieces, placeholder
from sparklog.records.file_records import FileRecords, FileSlice


def fetch_response(version: int, records: list[bytes | None]) -> object:
    partitions = [
        {
            "partition_index": i,
            "error_code": 0,
            "high_watermark": 10,
            "last_stable_offset": 10,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": r,
        }
        for i, r in enumerate(records)
    ]
    return kio_build.build(
        codec.response_schema(1, version),
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": "t", "topic_id": None, "partitions": partitions}],
        },
    )


def joined(parts: list[bytes | FileSlice]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.tobytes() for p in parts)


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_pieces_join_to_the_inline_encoding(tmp_path, version):
    path = tmp_path / "segment"
    content = os.urandom(300_000)
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        first = FileRecords((FileSlice(fd, 10, 200_000),))
        second = FileRecords((b"head", FileSlice(fd, 250_000, 150), FileSlice(fd, 0, 0)))
        inline = [first.tobytes(), b"small", None, second.tobytes()]
        expected = codec.encode_response(fetch_response(version, inline), 42)

        keys = [placeholder(0), placeholder(1)]
        body = fetch_response(version, [keys[0], b"small", None, keys[1]])
        frame = codec.encode_response(body, 42)
        parts = pieces(frame, {keys[0]: first, keys[1]: second}, version >= 12)
        assert joined(parts) == expected
        assert not any(isinstance(p, FileSlice) and not len(p) for p in parts)
        first.close()
        second.close()
    finally:
        os.close(fd)


def test_placeholders_differ():
    assert len({placeholder(0) for _ in range(100)}) == 100
